//! `rdmabench doctor`: a checklist of what stands between this machine and the numbers its
//! hardware can do, each line PASS, WARN or FAIL (INFO and SKIP where a check does not
//! apply) with the evidence and what to do. Exit code 0 when nothing FAILs, 1 otherwise.
//!
//! Everything is read through the sysfs root (`--sysfs-root` examines a copy of another
//! machine's); only on the live system (`/`) are verbs asked for the active MTU and this
//! process's CPU affinity compared with the NIC's NUMA node.

pub(crate) mod checks;
pub(crate) mod congestion;
pub(crate) mod host;
pub(crate) mod pcie;
pub(crate) mod verdict;

use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use topo::{
    list_rdma_devices, parse_bdf, GpuInfo, PairInfo, PciPath, RdmaDevice, RdmaPort, Sysfs, Topology,
};

use crate::report::Exporter;
use crate::sysroot::{is_live, parse_sysfs_root, sysfs_for};
use crate::text::printable;
use checks::{Cpus, VIRTUAL};
use host::{CpuList, GdrFacts};
use verdict::{failures, render, summary, Check};

/// The options of `rdmabench doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// RDMA device (default: the first with an ACTIVE port)
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub ib_dev: Option<String>,

    /// Port of the RDMA device
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub ib_port: u32,

    /// GPU: an index or a PCI bus id [default: the nearest]
    ///
    /// GPU: an index in PCI address order (as nvidia-smi numbers them) or a PCI bus id
    /// [default: the GPU nearest the NIC]
    #[arg(long, value_name = "N|BUS_ID")]
    pub gpu: Option<String>,

    /// Read this copy of another machine's sysfs instead of /
    ///
    /// Read this copy of another machine's sysfs instead of / (the directory holding sys/)
    #[arg(long, value_name = "DIR", value_parser = parse_sysfs_root)]
    pub sysfs_root: Option<PathBuf>,

    /// Seconds to watch the congestion and error counters for
    #[arg(long, value_name = "S", default_value_t = 3.0, value_parser = parse_sample_secs)]
    pub sample_secs: f64,

    /// CPUs the benchmark will run on, e.g. 0-15
    ///
    /// CPUs the benchmark will run on, e.g. 0-15 [default: those this process may use]
    #[arg(long, value_name = "LIST", value_parser = host::parse_cpus_arg)]
    pub(crate) cpus: Option<CpuList>,

    /// The port rate the link should run at (Gb/s): slower FAILs
    ///
    /// The port rate the link should run at, in Gb/s (e.g. 400): slower is a FAIL
    #[arg(long, value_name = "GBPS", value_parser = parse_expect_rate)]
    pub expect_rate: Option<f64>,
}

fn parse_sample_secs(text: &str) -> Result<f64, String> {
    match crate::units::parse_secs(text) {
        Ok(v) if (0.0..=600.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{text}' is not a sampling time: give seconds from 0 to 600, e.g. 3 or 0.5"
        )),
    }
}

fn parse_expect_rate(text: &str) -> Result<f64, String> {
    topo::PortRate::parse(text)
        .map(|rate| rate.gbps)
        .map_err(|e| e.to_string())
}

/// What to examine, from the command line.
#[derive(Debug, Clone, Default)]
pub(crate) struct Options {
    /// `-d`.
    pub device: Option<String>,
    /// `-i`.
    pub port: u32,
    /// `--gpu`.
    pub gpu: Option<String>,
    /// `--sample-secs`.
    pub sample: Duration,
    /// `--cpus`.
    pub cpus: Option<Vec<u32>>,
    /// `--expect-rate`.
    pub expect_gbps: Option<f64>,
}

impl DoctorArgs {
    /// The options these arguments ask for.
    pub(crate) fn options(&self) -> Options {
        Options {
            device: self.ib_dev.clone(),
            port: self.ib_port,
            gpu: self.gpu.clone(),
            sample: Duration::from_secs_f64(self.sample_secs),
            cpus: self.cpus.as_ref().map(|c| c.0.clone()),
            expect_gbps: self.expect_rate,
        }
    }
}

/// The outcome: a heading and the checks in order.
#[derive(Debug, Clone)]
pub(crate) struct Diagnosis {
    /// What was examined.
    pub heading: Vec<String>,
    /// The checklist.
    pub checks: Vec<Check>,
}

impl Diagnosis {
    /// Heading, checklist and summary, as printed.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        // The device, the GPU and the root: names from sysfs and the command line.
        for line in &self.heading {
            out.push_str(&printable(line));
            out.push('\n');
        }
        out.push('\n');
        out.push_str(&render(&self.checks));
        out.push('\n');
        out.push_str(&summary(&self.checks));
        out.push('\n');
        out
    }
}

/// `doctor`'s output: the [`Diagnosis`] as printed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TextExporter;

impl Exporter<Diagnosis> for TextExporter {
    fn render(&self, diagnosis: &Diagnosis) -> Result<Vec<u8>> {
        Ok(diagnosis.render().into_bytes())
    }
}

/// Runs `rdmabench doctor`: prints the checklist; an error (exit 1) when a check FAILs.
pub fn run(args: &DoctorArgs) -> Result<()> {
    let sysfs = sysfs_for(args.sysfs_root.as_deref());
    let diagnosis = diagnose(&sysfs, &args.options())?;
    let text = TextExporter.render(&diagnosis)?;
    print!("{}", String::from_utf8_lossy(&text));
    let failed = failures(&diagnosis.checks);
    if !failed.is_empty() {
        bail!(
            "doctor: {} check{} FAIL ({}); the lines marked FAIL say what to do",
            failed.len(),
            if failed.len() == 1 { "" } else { "s" },
            failed.join(", ")
        );
    }
    Ok(())
}

/// The RDMA device to examine: `-d`, else the first whose port is ACTIVE, else the first.
fn choose_device(sysfs: &Sysfs, opts: &Options) -> Result<Option<RdmaDevice>> {
    if let Some(name) = &opts.device {
        let nic = RdmaDevice::read(sysfs, name).with_context(|| format!("doctor -d {name}"))?;
        return Ok(Some(nic));
    }
    let names = list_rdma_devices(sysfs).context("listing RDMA devices")?;
    let mut first = None;
    for name in names {
        let nic = RdmaDevice::read(sysfs, &name)
            .with_context(|| format!("reading RDMA device {name}; -d picks another"))?;
        if nic.port(opts.port).is_some_and(|p| p.is_active()) {
            return Ok(Some(nic));
        }
        first.get_or_insert(nic);
    }
    Ok(first)
}

/// The GPU to examine, and why that one: `--gpu`, else the one nearest the NIC.
fn choose_gpu<'t>(
    topology: &'t Topology,
    nic: Option<&RdmaDevice>,
    wanted: Option<&str>,
) -> Result<Option<(&'t GpuInfo, String)>> {
    let listing = || {
        let list: Vec<String> = topology
            .gpus
            .iter()
            .enumerate()
            .map(|(i, g)| format!("{i}: {}", g.bdf))
            .collect();
        if list.is_empty() {
            "none".to_string()
        } else {
            list.join(", ")
        }
    };
    if let Some(wanted) = wanted {
        let found = match wanted.parse::<usize>() {
            Ok(index) => topology.gpus.get(index),
            Err(_) => {
                let bdf = parse_bdf(wanted).with_context(|| format!("--gpu {wanted}"))?;
                topology.gpus.iter().find(|g| g.bdf == bdf)
            }
        };
        return match found {
            Some(gpu) => Ok(Some((gpu, "given by --gpu".to_string()))),
            None => bail!(
                "--gpu {wanted}: no such GPU; GPUs (index: bus id, in PCI address \
                 order): {}",
                listing()
            ),
        };
    }
    let nearest = nic.and_then(|nic| {
        topology
            .pairs
            .iter()
            .filter(|p| p.nic == nic.name)
            .min_by_key(|p| p.path.class)
            .and_then(|p| topology.gpu(&p.gpu))
            .map(|g| {
                (
                    g,
                    format!("the nearest to {}; --gpu picks another", nic.name),
                )
            })
    });
    Ok(nearest.or_else(|| {
        let first = topology.gpus.first()?;
        Some((first, "the first; no NIC-GPU path to rank by".to_string()))
    }))
}

/// Examine the machine below `sysfs`.
pub(crate) fn diagnose(sysfs: &Sysfs, opts: &Options) -> Result<Diagnosis> {
    let live = is_live(sysfs);
    let nic = choose_device(sysfs, opts)?;
    let mut checks = Vec::new();
    let topology = match Topology::scan(sysfs) {
        Ok(t) => Some(t),
        Err(e) => {
            checks.push(
                Check::warn("topology", format!("cannot read the PCIe topology: {e}"))
                    .fix("`lspci -tv` shows the tree the kernel sees"),
            );
            None
        }
    };
    let gpu = match &topology {
        Some(t) => choose_gpu(t, nic.as_ref(), opts.gpu.as_deref())?,
        None => None,
    };
    let heading = heading_lines(sysfs, opts, live, nic.as_ref(), gpu.as_ref());
    let gpu_info: Option<&GpuInfo> = gpu.as_ref().map(|(gpu, _)| *gpu);

    let port = nic.as_ref().and_then(|n| n.port(opts.port));
    let netdev: Option<String> = match (&nic, port) {
        (Some(nic), Some(port)) => port.netdevs.first().or(nic.netdevs.first()).cloned(),
        _ => None,
    };
    let started = Instant::now();
    let before = match (&nic, port) {
        (Some(nic), Some(_)) => Some(read_counters(sysfs, opts, nic, netdev.as_deref())),
        _ => None,
    };

    checks.extend(nic_checks(sysfs, opts, nic.as_ref(), port));
    checks.push(gpu_link(gpu_info));
    let (mtu, mtu_active) = mtu_checks(sysfs, opts, live, nic.as_ref(), port, netdev.as_deref());
    checks.extend(mtu);
    let counters_at = checks.len();
    checks.extend(gpudirect_checks(
        sysfs,
        live,
        topology.as_ref(),
        nic.as_ref(),
        gpu_info,
    ));
    checks.push(iommu_check(topology.as_ref(), nic.as_ref()));
    checks.extend(cpu_checks(sysfs, opts, live, nic.as_ref()));
    if let (Some(nic), Some(port)) = (&nic, port) {
        let link = nic.pci.as_ref().map(|p| &p.link);
        checks.push(checks::ceilings(port, mtu_active, link));
    }

    if let (Some(nic), Some(port), Some(before)) = (&nic, port, &before) {
        let [congestion, errors] =
            sample_counters(sysfs, opts, nic, port, before, started, netdev.as_deref());
        checks.insert(counters_at, errors);
        checks.insert(counters_at, congestion);
    }
    Ok(Diagnosis { heading, checks })
}

/// The heading's lines: the device and port, the GPU and, for a snapshot, the sysfs root.
fn heading_lines(
    sysfs: &Sysfs,
    opts: &Options,
    live: bool,
    nic: Option<&RdmaDevice>,
    gpu: Option<&(&GpuInfo, String)>,
) -> Vec<String> {
    let mut heading = Vec::new();
    match nic {
        Some(nic) => heading.push(format!("rdmabench doctor: {} port {}", nic.name, opts.port)),
        None => heading.push("rdmabench doctor: no RDMA device".to_string()),
    }
    match gpu {
        Some((gpu, why)) => heading.push(format!("GPU {} ({why})", gpu.bdf)),
        None => heading.push("GPU: none".to_string()),
    }
    if !live {
        heading.push(format!(
            "sysfs root: {} (a snapshot: verbs and this process's CPUs are not consulted)",
            sysfs.root().display()
        ));
    }
    heading
}

/// The device, port state, port rate and NIC PCIe link checks; one FAIL without a device.
fn nic_checks(
    sysfs: &Sysfs,
    opts: &Options,
    nic: Option<&RdmaDevice>,
    port: Option<&RdmaPort>,
) -> Vec<Check> {
    let Some(nic) = nic else {
        return vec![Check::fail(
            "RDMA device",
            format!(
                "no RDMA device under {}",
                sysfs
                    .host_path(std::path::Path::new("/sys/class/infiniband"))
                    .display()
            ),
        )
        .fix(
            "load the NIC's RDMA driver (mlx5_ib, ...) and install rdma-core; `rdma link` \
             lists devices; for soft-RoCE `rdma link add rxe0 type rxe netdev eth0`",
        )];
    };
    let mut checks = vec![checks::device(nic), checks::port_state(nic, opts.port)];
    match port {
        Some(port) => checks.push(checks::port_rate(nic, port, opts.expect_gbps)),
        None => checks.push(Check::skip("port rate", format!("no port {}", opts.port))),
    }
    checks.push(nic_link(sysfs, nic));
    checks
}

/// The GPU's PCIe link check, against the port above it.
fn gpu_link(gpu: Option<&GpuInfo>) -> Check {
    match gpu {
        Some(gpu) => {
            let port = gpu.path.bridges().last().map(|h| h.bdf.as_str());
            let check = pcie::pcie_link("GPU PCIe link", &gpu.bdf, &gpu.link, port, true);
            pcie::with_uplinks(check, &pcie::downtrained_uplinks(&gpu.path))
        }
        None => Check::skip("GPU PCIe link", "no GPU found"),
    }
}

/// The MTU and RoCEv2 GID checks (none without a device), and the active MTU when known.
fn mtu_checks(
    sysfs: &Sysfs,
    opts: &Options,
    live: bool,
    nic: Option<&RdmaDevice>,
    port: Option<&RdmaPort>,
    netdev: Option<&str>,
) -> (Vec<Check>, Option<u32>) {
    match (nic, port) {
        (Some(nic), Some(port)) => {
            let verbs = live.then(|| verbs_active_mtu(&nic.name, opts.port));
            let fact = checks::mtu_fact(sysfs, port.layer(), netdev, verbs);
            let iwarp = checks::is_iwarp(nic);
            let mtu = checks::mtu(&nic.name, port, &fact, iwarp);
            let gids = checks::read_gids(sysfs, &nic.name, opts.port);
            let gid = checks::roce_gid(port, &gids, netdev, iwarp);
            (vec![mtu, gid], fact.active)
        }
        (Some(_), None) => {
            let mtu = Check::skip("MTU", format!("no port {}", opts.port));
            let gid = Check::skip("RoCEv2 GID", format!("no port {}", opts.port));
            (vec![mtu, gid], None)
        }
        (None, _) => (Vec::new(), None),
    }
}

/// The NIC-GPU path, ACS, GPUDirect RDMA and GPU dma-buf checks, skipped where they do not apply.
fn gpudirect_checks(
    sysfs: &Sysfs,
    live: bool,
    topology: Option<&Topology>,
    nic: Option<&RdmaDevice>,
    gpu: Option<&GpuInfo>,
) -> Vec<Check> {
    let pair: Option<&PairInfo> = match (topology, nic, gpu) {
        (Some(t), Some(nic), Some(gpu)) => t.pair(&nic.name, &gpu.bdf),
        _ => None,
    };
    let gdr_skip = match (nic, gpu) {
        (Some(nic), _) if nic.is_virtual() => Some(format!("{VIRTUAL}: GPUDirect needs a PCI NIC")),
        (None, _) => Some("no RDMA device".to_string()),
        (_, None) => Some("no GPU found".to_string()),
        _ => None,
    };
    let mut checks = Vec::new();
    match (&gdr_skip, pair, topology) {
        (None, Some(pair), Some(topology)) => {
            checks.push(checks::path_class(topology, pair));
            checks.push(checks::acs(pair));
        }
        _ => {
            let why = gdr_skip
                .clone()
                .unwrap_or_else(|| "no NIC-GPU path".to_string());
            checks.push(Check::skip("NIC-GPU path", why.clone()));
            checks.push(Check::skip("ACS on the path", why));
        }
    }
    match &gdr_skip {
        None => {
            let (bdf, kind) = gpu.map_or(("", topo::Accelerator::Nvidia), |g| {
                (g.bdf.as_str(), g.kind)
            });
            checks.push(checks::gpudirect_for(kind, &GdrFacts::read(sysfs)));
            checks.push(checks::gpu_dmabuf_attribute(bdf, kind, live));
        }
        Some(why) => {
            checks.push(Check::skip("GPUDirect RDMA", why.clone()));
            checks.push(Check::skip("GPU dma-buf support", why.clone()));
        }
    }
    checks
}

/// The IOMMU check, with the NIC's IOMMU group type where it has one.
fn iommu_check(topology: Option<&Topology>, nic: Option<&RdmaDevice>) -> Check {
    match topology {
        Some(t) => {
            let group = nic
                .and_then(|n| n.pci.as_ref())
                .and_then(|p| p.iommu_type.as_deref());
            checks::iommu(&t.iommu, group)
        }
        None => Check::skip("IOMMU", "topology unreadable"),
    }
}

/// The NUMA locality check (with a device) and the CPU governor check.
fn cpu_checks(sysfs: &Sysfs, opts: &Options, live: bool, nic: Option<&RdmaDevice>) -> Vec<Check> {
    let mut checks = Vec::new();
    let cpus = cpus(live, opts);
    let nodes = host::nodes(sysfs);
    if let Some(nic) = nic {
        checks.push(if nic.is_virtual() {
            Check::skip("NUMA locality", VIRTUAL)
        } else {
            checks::numa(&nic.name, nic.numa_node, &cpus, &nodes)
        });
    }
    let known = match &cpus {
        Cpus::Known(list, _) => Some(list.as_slice()),
        Cpus::Unknown(_) => None,
    };
    checks.push(checks::governor(&host::governors(sysfs), known));
    checks
}

/// The port's congestion and error counters, and those of its netdev where it has one.
fn read_counters(
    sysfs: &Sysfs,
    opts: &Options,
    nic: &RdmaDevice,
    netdev: Option<&str>,
) -> congestion::Sample {
    let netdevs: Vec<String> = netdev.iter().map(|n| n.to_string()).collect();
    congestion::read(sysfs, &nic.name, opts.port, &netdevs)
}

/// The congestion and error checks: the counters read again once `--sample-secs` has passed.
fn sample_counters(
    sysfs: &Sysfs,
    opts: &Options,
    nic: &RdmaDevice,
    port: &RdmaPort,
    before: &congestion::Sample,
    started: Instant,
    netdev: Option<&str>,
) -> [Check; 2] {
    // Nothing to watch, nothing to wait for.
    if !before.is_empty() {
        thread::sleep(opts.sample.saturating_sub(started.elapsed()));
    }
    let elapsed = if opts.sample.is_zero() {
        Duration::ZERO
    } else {
        started.elapsed()
    };
    let after = read_counters(sysfs, opts, nic, netdev);
    let ethernet = port.layer() == Some(topo::LinkLayer::Ethernet);
    congestion::checks(before, &after, elapsed, ethernet, netdev)
}

/// The NIC's PCIe link check, against the port above it.
fn nic_link(sysfs: &Sysfs, nic: &RdmaDevice) -> Check {
    const NAME: &str = "NIC PCIe link";
    let Some(pci) = &nic.pci else {
        return Check::skip(NAME, VIRTUAL);
    };
    let path = match PciPath::read(sysfs, pci) {
        Ok(path) => path,
        Err(e) => {
            return Check::warn(
                NAME,
                format!("{} {}; its path is unreadable: {e}", pci.bdf, pci.link),
            )
        }
    };
    let port = path.bridges().last().map(|h| h.bdf.as_str());
    let check = pcie::pcie_link(NAME, &pci.bdf, &pci.link, port, false);
    pcie::with_uplinks(check, &pcie::downtrained_uplinks(&path))
}

/// The CPUs to compare with the NIC's node: `--cpus`, else this process's on the live
/// system; unknown for a snapshot.
fn cpus(live: bool, opts: &Options) -> Cpus {
    if let Some(list) = &opts.cpus {
        return Cpus::Known(list.clone(), "given by --cpus");
    }
    if !live {
        return Cpus::Unknown(
            "a snapshot's CPUs are not this process's: --cpus LIST names the ones to check"
                .to_string(),
        );
    }
    match host::allowed_cpus() {
        Ok(list) => Cpus::Known(list, "this process may use"),
        Err(e) => Cpus::Unknown(format!("sched_getaffinity failed: {e}")),
    }
}

/// The active MTU from verbs, or why not.
pub(crate) fn verbs_active_mtu(device: &str, port: u32) -> Result<u32, String> {
    let port = u8::try_from(port).map_err(|_| format!("port {port} is beyond verbs' 255"))?;
    let dev = verbs::Device::open(Some(device)).map_err(|e| e.to_string())?;
    dev.port(port)
        .map(|p| p.active_mtu)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::verdict::Verdict;
    use super::*;

    use crate::sysroot::fixture;

    fn verdicts(name: &str, opts: Options) -> Vec<(&'static str, Verdict)> {
        let d = diagnose(&fixture(name), &Options { port: 1, ..opts }).unwrap();
        d.checks.iter().map(|c| (c.name, c.verdict)).collect()
    }

    fn verdict_of(list: &[(&'static str, Verdict)], name: &str) -> Verdict {
        list.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no check {name} in {list:?}"))
    }

    #[test]
    fn dgx_passes_everything_that_applies() {
        let v = verdicts("dgx-h100", Options::default());
        assert!(
            v.iter()
                .all(|(_, v)| *v != Verdict::Fail && *v != Verdict::Warn),
            "{v:?}"
        );
        assert_eq!(verdict_of(&v, "NIC-GPU path"), Verdict::Pass);
        assert_eq!(verdict_of(&v, "NUMA locality"), Verdict::Skip);
        let v = verdicts(
            "dgx-h100",
            Options {
                cpus: Some(vec![56, 57]),
                ..Options::default()
            },
        );
        assert_eq!(verdict_of(&v, "NUMA locality"), Verdict::Fail);
    }

    #[test]
    fn gpu_by_index_and_bus_id() {
        let opts = |gpu: &str| Options {
            gpu: Some(gpu.to_string()),
            ..Options::default()
        };
        let v = verdicts("dgx-h100", opts("1"));
        assert_eq!(verdict_of(&v, "NIC-GPU path"), Verdict::Fail);
        let v = verdicts("dgx-h100", opts("00000000:19:00.0"));
        assert_eq!(verdict_of(&v, "NIC-GPU path"), Verdict::Pass);
        let err = diagnose(
            &fixture("dgx-h100"),
            &Options {
                port: 1,
                ..opts("7")
            },
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("0: 0000:19:00.0, 1: 0000:9e:00.0"),
            "{err}"
        );
    }

    #[test]
    fn virtual_devices_skip_pcie_checks() {
        let d = diagnose(
            &fixture("rxe-vm"),
            &Options {
                port: 1,
                ..Options::default()
            },
        )
        .unwrap();
        let link = d.checks.iter().find(|c| c.name == "NIC PCIe link").unwrap();
        assert_eq!(link.verdict, Verdict::Skip);
        assert_eq!(link.evidence, VIRTUAL);
        assert!(failures(&d.checks).is_empty(), "{}", d.render());
    }

    #[test]
    fn a_missing_port_fails_and_its_checks_skip() {
        let d = diagnose(
            &fixture("dgx-h100"),
            &Options {
                port: 2,
                ..Options::default()
            },
        )
        .unwrap();
        let state = d.checks.iter().find(|c| c.name == "port state").unwrap();
        assert_eq!(state.verdict, Verdict::Fail);
        assert!(state.evidence.contains("no port 2"), "{}", state.evidence);
    }
}
