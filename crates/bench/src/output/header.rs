//! The run header: a pure function of the run's record ([`RunRecord`]), so that what a run
//! shows is what it records, and the header of any record renders again here (and is
//! snapshot-tested) without a device.
//!
//! Which lines a test shows is decided here, from what the record holds, and nowhere else:
//! - the parameter lines are the `params` a test has (`catalogue::PARAMS`): a latency
//!   test's record has no TX depth, CQ moderation or post list, a READ test's has its
//!   outstanding READs, a SEND test's its RX depth;
//! - `Run` counts iterations (with the latency tests' warm-up) or the duration, and
//!   `--repeat`'s repetitions;
//! - `Staging` only when the GPU's memory went through bounce buffers (`gpu.staging`);
//! - `Direction` only for `-b`; `Latency` and `Clock` only for latency tests;
//! - the warnings (a downtrained link) and notes (why a ceiling is missing) under the block.

use std::fmt::Write as _;

use crate::catalogue;
use crate::engine::bw::Stop;
use crate::memory::{DmaBufVia, GpuPath, MemMode};
use crate::output::table;
use crate::report::{DeviceRecord, GpuRecord, ParamsRecord, RunRecord};

/// The header block of `record`, then its warnings (in bold when `bold`: a terminal) and
/// notes, one a line.
pub fn render(record: &RunRecord, bold: bool) -> String {
    render_fields(record, &fields(record), bold)
}

/// The header block of `record` with `fields`, then its warnings and notes.
fn render_fields(record: &RunRecord, fields: &[(&'static str, String)], bold: bool) -> String {
    let mut out = table::header(&title(record), fields);
    for warning in &record.warnings {
        if bold {
            let _ = writeln!(out, " \x1b[1mWARNING: {warning}\x1b[0m");
        } else {
            let _ = writeln!(out, " WARNING: {warning}");
        }
    }
    for note in &record.notes {
        let _ = writeln!(out, " note: {note}");
    }
    out
}

/// "RDMA_Write BW Test (client)": perftest's title of the test, and the side.
fn title(record: &RunRecord) -> String {
    let test = &record.params.test;
    let name =
        crate::plan::TestKind::parse(test).map_or_else(|| test.clone(), |t| t.title().to_string());
    match &record.role {
        Some(role) => format!("{name} ({role})"),
        None => name,
    }
}

/// The header's label/value pairs, in display order.
pub(crate) fn fields(record: &RunRecord) -> Vec<(&'static str, String)> {
    let d = &record.device;
    let p = &record.params;
    let mut fields = vec![
        ("Device", d.name.clone()),
        ("Firmware", or_dash(&d.fw_ver)),
        ("Port", d.port.to_string()),
        ("Link layer", d.link_layer.clone()),
        (
            "Rate",
            d.active_speed
                .clone()
                .unwrap_or_else(|| "unknown".to_string()),
        ),
        ("GID index", gid_text(d)),
    ];
    fields.extend(catalogue::header_fields(p));
    fields.push(("Run", run_text(p)));
    fields.push(("Memory", memory_text(&p.mem, record.gpu.as_ref())));
    if let Some(s) = record.gpu.as_ref().and_then(|g| g.staging.as_ref()) {
        let bounce = crate::engine::staged::describe_bounce(s.depth, s.chunk);
        fields.push(("Staging", format!("{bounce} per QP")));
    }
    if p.bidirectional {
        fields.push((
            "Direction",
            "bidirectional: each side measures what it sends".to_string(),
        ));
    }
    if let Some(kind) = &p.latency {
        let kind = if kind == "one_way" {
            "one-way (RTT/2)"
        } else {
            "round trip"
        };
        fields.push(("Latency", kind.to_string()));
        let clock = p.clock.as_deref().unwrap_or("unknown");
        fields.push(("Clock", crate::clock::describe(clock, p.clock_hz)));
    }
    fields.push(("NUMA node", numa_text(p.numa_node)));
    let cpu = p.cpus.as_deref();
    fields.push((
        "Measuring on",
        crate::placement::describe(cpu, p.placement.as_deref()),
    ));
    fields.push(("Ceiling", ceiling_text(record)));
    fields
}

fn or_dash(text: &str) -> String {
    if text.is_empty() {
        "-".to_string()
    } else {
        text.to_string()
    }
}

/// "1 (RoCE v2)", or "none (LID routing)".
fn gid_text(d: &DeviceRecord) -> String {
    match (d.gid_index, &d.gid_kind) {
        (Some(i), Some(kind)) => format!("{i} ({kind})"),
        (Some(i), None) => i.to_string(),
        (None, _) => "none (LID routing)".to_string(),
    }
}

/// The NIC's NUMA node, or why it is unknown.
fn numa_text(node: Option<u32>) -> String {
    match node {
        Some(n) => n.to_string(),
        None => "unknown (sysfs gives none: a virtual device, or -1)".to_string(),
    }
}

/// "host", or "cuda:0: NVIDIA H200 at 0000:17:00.0, GPUDirect RDMA on (dma-buf)", and how
/// the GPU was chosen where `--mem` named none ("; the GPU nearest mlx5_0 (PIX on the PCIe
/// tree)").
fn memory_text(mem: &str, gpu: Option<&GpuRecord>) -> String {
    let Some(g) = gpu else {
        return mem.to_string();
    };
    let path = match (g.gdr, MemMode::parse(mem)) {
        (false, _) => "GPUDirect RDMA off (staged through host memory)".to_string(),
        (true, Ok(m)) if m.gpu_mem().is_some_and(|g| g.path == GpuPath::PeerMem) => {
            let peer = m.runtime().map_or("peer memory", |r| r.peer_memory().name);
            format!("GPUDirect RDMA on ({peer})")
        }
        (true, Ok(m)) => match m.gpu_mem().map(|g| g.dmabuf) {
            Some(DmaBufVia::Pcie) => "GPUDirect RDMA on (dma-buf mapped through PCIe)".to_string(),
            Some(DmaBufVia::DataDirect) => {
                "GPUDirect RDMA on (dma-buf mapped through PCIe, mlx5 Data Direct)".to_string()
            }
            _ => "GPUDirect RDMA on (dma-buf)".to_string(),
        },
        (true, Err(_)) => "GPUDirect RDMA on (dma-buf)".to_string(),
    };
    let chosen = g
        .chosen
        .as_ref()
        .map(|why| format!("; {why}"))
        .unwrap_or_default();
    format!("{mem}: {} at {}, {path}{chosen}", g.name, g.bus_id)
}

/// "5000 iterations per QP and size" or "3.0 s per size, 2.4 s measured (0.3 s warm-up and
/// cool-down left out)", with the repetitions of `--repeat`.
fn run_text(params: &ParamsRecord) -> String {
    let reps = if params.repeat > 1 {
        format!(", {} repetitions", params.repeat)
    } else {
        String::new()
    };
    let stop = match params.duration {
        Some(secs) => Stop::for_duration(secs),
        None => Stop::Iters(params.iters.unwrap_or(0)),
    };
    match stop {
        Stop::Iters(n) => {
            let warm = params
                .warmup
                .map(|w| format!(" after {w} warm-up"))
                .unwrap_or_default();
            format!("{n} iterations per QP and size{warm}{reps}")
        }
        Stop::Duration { total, margin } => format!(
            "{:.1} s per size, {:.1} s measured ({:.1} s warm-up and cool-down left out){reps}",
            total.as_secs_f64(),
            (total - 2 * margin).as_secs_f64(),
            margin.as_secs_f64()
        ),
    }
}

/// "wire 48.30 GB/s (wire 48.30, PCIe 51.98)", or "unknown".
fn ceiling_text(record: &RunRecord) -> String {
    let c = &record.ceilings;
    match (c.limit.as_deref(), c.limit_gbps) {
        (Some(limit), Some(gbps)) => {
            let mut text = format!("{limit} {gbps:.2} GB/s");
            if let (Some(w), Some(p)) = (c.wire_gbps, c.pcie_gbps) {
                text.push_str(&format!(" (wire {w:.2}, PCIe {p:.2})"));
            }
            text
        }
        _ => "unknown".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::table::{Table, WIDTH};
    use crate::report::samples::{self, Sample};
    use crate::report::{Exporter, JsonExporter};

    /// The header of `record` with its parameter lines cut to one: each parameter's place in
    /// the header is the catalogue's test (`catalogue_reach.rs`), so that a new parameter
    /// changes no snapshot.
    fn params_cut(record: &RunRecord) -> String {
        let params = catalogue::header_fields(&record.params);
        let mut fields: Vec<_> = fields(record)
            .into_iter()
            .filter(|f| !params.contains(f))
            .collect();
        let at = fields.iter().position(|f| f.0 == "Run").unwrap();
        fields.insert(at, ("Parameters", "(catalogue_reach.rs)".to_string()));
        render_fields(record, &fields, false)
    }

    /// What a live run of `s` prints on stdout: the header, the columns, each size's rows
    /// as it finishes (every repetition of the sweep in turn) and the end of the table.
    fn printed(s: &Sample) -> String {
        let table = Table::of(&s.record.params);
        let mut out = params_cut(&s.record);
        out.push_str(&table.columns());
        out.push('\n');
        for rep in 0..s.record.params.repeat {
            for size in &s.reps {
                out.push_str(&table.rows(rep, &size[rep as usize]));
            }
        }
        out.push_str(&table.summary(&s.record.results));
        out
    }

    #[test]
    fn a_bandwidth_run() {
        insta::assert_snapshot!(printed(&samples::write_bw()));
    }

    #[test]
    fn a_latency_run() {
        insta::assert_snapshot!(printed(&samples::write_lat()));
    }

    #[test]
    fn a_bidirectional_run() {
        insta::assert_snapshot!(printed(&samples::send_bw_bidirectional()));
    }

    #[test]
    fn a_repeated_timed_run() {
        insta::assert_snapshot!(printed(&samples::read_bw_repeated()));
    }

    #[test]
    fn a_staged_gpu_run_header() {
        insta::assert_snapshot!(params_cut(&samples::write_bw_staged().record));
    }

    #[test]
    fn the_header_of_a_written_record_is_the_header_the_run_showed() {
        for s in [
            samples::write_bw(),
            samples::write_lat(),
            samples::send_bw_bidirectional(),
            samples::read_bw_repeated(),
            samples::write_bw_staged(),
        ] {
            let bytes = JsonExporter.render(&s.record).unwrap();
            let back: RunRecord = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(render(&back, false), render(&s.record, false));
        }
    }

    #[test]
    fn only_a_pair_on_its_own_line_passes_the_rule() {
        for s in [
            samples::write_bw(),
            samples::write_lat(),
            samples::send_bw_bidirectional(),
            samples::read_bw_repeated(),
            samples::write_bw_staged(),
        ] {
            let fields = fields(&s.record);
            let width = fields.iter().map(|(l, _)| l.len()).max().unwrap();
            let alone: Vec<String> = fields
                .iter()
                .map(|(label, value)| format!(" {label:<width$}: {value}"))
                .collect();
            let text = table::header(&title(&s.record), &fields);
            for line in text.lines().filter(|l| l.chars().count() > WIDTH) {
                assert!(alone.iter().any(|a| a == line), "{line:?} in\n{text}");
            }
        }
    }

    #[test]
    fn a_gpu_chosen_for_its_nic_says_so_after_its_path() {
        let mut gpu = samples::write_bw_staged().record.gpu.unwrap();
        gpu.gdr = true;
        gpu.chosen = Some("the GPU nearest mlx5_0 (PIX on the PCIe tree)".to_string());
        assert_eq!(
            memory_text("cuda", Some(&gpu)),
            "cuda: NVIDIA H100 80GB HBM3 at 0000:19:00.0, GPUDirect RDMA on (dma-buf); the GPU \
             nearest mlx5_0 (PIX on the PCIe tree)"
        );
        gpu.chosen = None;
        assert_eq!(
            memory_text("cuda-pcie:0", Some(&gpu)),
            "cuda-pcie:0: NVIDIA H100 80GB HBM3 at 0000:19:00.0, GPUDirect RDMA on (dma-buf \
             mapped through PCIe)"
        );
        assert!(memory_text("cuda-data-direct:0", Some(&gpu))
            .ends_with("GPUDirect RDMA on (dma-buf mapped through PCIe, mlx5 Data Direct)"));
    }

    #[test]
    fn warnings_are_bold_on_a_terminal() {
        let record = samples::send_bw_bidirectional().record;
        let warning = " WARNING: NIC 0000:41:00.0 PCIe link DOWNTRAINED";
        assert!(render(&record, false).contains(warning));
        let bold = render(&record, true);
        assert!(
            bold.contains(" \x1b[1mWARNING: NIC 0000:41:00.0 PCIe link DOWNTRAINED"),
            "{bold}"
        );
    }
}
