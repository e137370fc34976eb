//! `rdmabench ceiling`: the ceilings model worked through for a NIC rate and a PCIe link, for
//! a planner without the hardware. `--json` gives the result record's `ceilings` fields.

use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;
use topo::ceiling::DEFAULT_MPS;
use topo::{
    ceilings, explain, parse_mps, parse_mtu, parse_pcie, Ceilings, Limit, LinkLayer, Pcie,
    PortRate, Staged, Wire,
};

use crate::report::{Exporter, JsonExporter};

/// The options of `rdmabench ceiling`.
#[derive(Debug, Args)]
pub struct CeilingArgs {
    /// The NIC's port rate: 400 (Gb/s), 400G, 400Gb/s
    ///
    /// The NIC's port rate in Gb/s: 400, 400G, 400Gb/s or sysfs's "400 Gb/sec (4X NDR)"
    #[arg(long, value_name = "GBPS", value_parser = rate_arg)]
    pub nic_rate: PortRate,

    /// The NIC's PCIe link: gen<1-6>x<1|2|4|8|12|16|32>, e.g. gen5x16
    #[arg(long, value_name = "LINK", value_parser = pcie_arg)]
    pub pcie: Pcie,

    /// PCIe Max Payload Size in bytes, 128 .. 4096
    ///
    /// PCIe Max Payload Size in bytes: 128, 256, 512, 1024, 2048 or 4096
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MPS, value_parser = mps_arg)]
    pub mps: u32,

    /// Active (path) MTU in bytes, 256 .. 4096
    ///
    /// Active (path) MTU in bytes: 256, 512, 1024, 2048 or 4096
    #[arg(long, value_name = "BYTES", default_value_t = 4096, value_parser = mtu_arg)]
    pub mtu: u32,

    /// Link layer: ib (InfiniBand) or roce (RoCE v2)
    ///
    /// Link layer: ib (InfiniBand) or roce (RoCEv2 over Ethernet)
    #[arg(long, value_name = "ib|roce", default_value = "ib", value_parser = layer_arg)]
    pub link_layer: LinkLayer,

    /// The GPU's PCIe link (gen5x16): adds the staged ceiling
    ///
    /// The GPU's PCIe link, to add the staged (GPUDirect off) ceiling, e.g. gen5x16
    #[arg(long, value_name = "LINK", value_parser = pcie_arg)]
    pub gpu_pcie: Option<Pcie>,

    /// Print one JSON document instead of the arithmetic
    #[arg(long)]
    pub json: bool,
}

fn rate_arg(text: &str) -> Result<PortRate, String> {
    PortRate::parse(text).map_err(|e| e.to_string())
}

fn pcie_arg(text: &str) -> Result<Pcie, String> {
    parse_pcie(text).map_err(|e| e.to_string())
}

fn mps_arg(text: &str) -> Result<u32, String> {
    parse_mps(text).map_err(|e| e.to_string())
}

fn mtu_arg(text: &str) -> Result<u32, String> {
    parse_mtu(text).map_err(|e| e.to_string())
}

fn layer_arg(text: &str) -> Result<LinkLayer, String> {
    text.parse::<LinkLayer>().map_err(|e| e.to_string())
}

/// What was asked, as the JSON document repeats it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Inputs {
    /// The port rate in Gb/s.
    pub nic_rate_gbps: f64,
    /// "infiniband" or "ethernet".
    pub link_layer: LinkLayer,
    /// The active MTU.
    pub mtu: u32,
    /// The NIC's link.
    pub pcie: Pcie,
    /// The GPU's link, for the staged ceiling.
    pub gpu_pcie: Option<Pcie>,
}

/// The JSON document of `ceiling --json`: the record's `ceilings` fields at the top level.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CeilingReport {
    /// What was asked.
    pub inputs: Inputs,
    /// wire_gbps, pcie_gbps, staged_gbps, limit, limit_gbps.
    #[serde(flatten)]
    pub ceilings: Ceilings,
    /// The worked arithmetic, one line each.
    pub explain: Vec<String>,
    /// One sentence: what binds and what would lift it.
    pub verdict: String,
}

impl CeilingArgs {
    fn wire(&self) -> Wire {
        Wire {
            link_layer: self.link_layer,
            rate: self.nic_rate.clone(),
            mtu: self.mtu,
            grh: false,
        }
    }

    fn with_mps(&self, link: Pcie) -> Pcie {
        Pcie {
            mps: self.mps,
            ..link
        }
    }

    /// The computed report.
    pub(crate) fn report(&self) -> CeilingReport {
        let wire = self.wire();
        let nic = self.with_mps(self.pcie);
        let staged = self.gpu_pcie.map(|gpu| Staged {
            gpu: self.with_mps(gpu),
            shared: None,
        });
        let result = ceilings(&wire, &nic, staged.as_ref());
        CeilingReport {
            inputs: Inputs {
                nic_rate_gbps: self.nic_rate.gbps,
                link_layer: self.link_layer,
                mtu: self.mtu,
                pcie: nic,
                gpu_pcie: staged.map(|s| s.gpu),
            },
            ceilings: result,
            explain: explain(&wire, &nic, staged.as_ref()),
            verdict: verdict(&wire, &nic, &result),
        }
    }
}

/// One sentence on the binding ceiling.
fn verdict(wire: &Wire, nic: &Pcie, result: &Ceilings) -> String {
    let layer = match wire.link_layer {
        LinkLayer::InfiniBand => "InfiniBand",
        LinkLayer::Ethernet => "RoCE",
    };
    let what = format!(
        "a {} Gb/s {layer} NIC behind Gen{} x{}",
        wire.rate.gbps, nic.gen, nic.width
    );
    match result.limit {
        Limit::Wire => format!(
            "{what} is wire-bound at {:.2} GB/s; its PCIe link has {:.0} % headroom",
            result.wire_gbps,
            100.0 * (result.pcie_gbps / result.wire_gbps - 1.0)
        ),
        Limit::Pcie => {
            let mut text = format!(
                "{what} is PCIe-bound at {:.2} GB/s, {:.0} % of its {:.2} GB/s wire ceiling",
                result.pcie_gbps,
                100.0 * result.pcie_gbps / result.wire_gbps,
                result.wire_gbps
            );
            let enough =
                (nic.gen + 1..=6).find(|&gen| Pcie { gen, ..*nic }.gbps() >= result.wire_gbps);
            if let Some(gen) = enough {
                text.push_str(&format!(
                    "; Gen{gen} x{} would make it wire-bound",
                    nic.width
                ));
            }
            text
        }
        Limit::Staged => format!(
            "{what}: with GPUDirect off the staged copy through host memory binds at {:.2} GB/s, \
             {:.0} % of the wire ceiling",
            result.limit_gbps,
            100.0 * result.limit_gbps / result.wire_gbps
        ),
    }
}

/// `ceiling`'s text: the worked arithmetic, then the verdict.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TextExporter;

impl Exporter<CeilingReport> for TextExporter {
    fn render(&self, report: &CeilingReport) -> Result<Vec<u8>> {
        let mut out = String::new();
        for line in &report.explain {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str(&report.verdict);
        out.push('\n');
        Ok(out.into_bytes())
    }
}

/// Runs `rdmabench ceiling`: the arithmetic, or with `--json` the [`CeilingReport`].
pub fn run(args: &CeilingArgs) -> Result<()> {
    let report = args.report();
    let bytes = if args.json {
        JsonExporter
            .render(&report)
            .context("writing the ceilings as JSON")?
    } else {
        TextExporter.render(&report)?
    };
    print!("{}", String::from_utf8_lossy(&bytes));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Harness {
        #[command(flatten)]
        args: CeilingArgs,
    }

    fn parse(args: &[&str]) -> Result<CeilingArgs, clap::Error> {
        Harness::try_parse_from(std::iter::once("ceiling").chain(args.iter().copied()))
            .map(|h| h.args)
    }

    #[test]
    fn ndr_behind_gen4_is_pcie_bound_and_gen5_lifts_it() {
        let r = parse(&["--nic-rate", "400", "--pcie", "gen4x16"])
            .unwrap()
            .report();
        assert_eq!(r.ceilings.limit, Limit::Pcie);
        assert!((25.5..26.5).contains(&r.ceilings.limit_gbps), "{r:?}");
        assert!(
            r.verdict.contains("Gen5 x16 would make it wire-bound"),
            "{}",
            r.verdict
        );
        let r = parse(&["--nic-rate", "400", "--pcie", "gen5x16"])
            .unwrap()
            .report();
        assert_eq!(r.ceilings.limit, Limit::Wire);
        assert!(r.verdict.contains("wire-bound"), "{}", r.verdict);
    }

    #[test]
    fn json_has_the_record_field_names() {
        let r = parse(&[
            "--nic-rate",
            "200",
            "--pcie",
            "gen4x16",
            "--link-layer",
            "roce",
        ])
        .unwrap()
        .report();
        let doc = serde_json::to_value(&r).unwrap();
        for key in ["wire_gbps", "pcie_gbps", "limit", "limit_gbps"] {
            assert!(doc.get(key).is_some(), "{key} missing in {doc}");
        }
        assert!(doc["staged_gbps"].is_null());
        assert_eq!(doc["inputs"]["link_layer"], "ethernet");
        assert_eq!(doc["inputs"]["pcie"]["mps"], 256);
    }

    #[test]
    fn the_gpu_link_adds_the_staged_ceiling() {
        let r = parse(&[
            "--nic-rate",
            "400",
            "--pcie",
            "gen5x16",
            "--gpu-pcie",
            "gen4x16",
            "--mps",
            "512",
        ])
        .unwrap()
        .report();
        assert_eq!(r.ceilings.limit, Limit::Staged);
        assert_eq!(r.inputs.gpu_pcie.unwrap().mps, 512);
        assert!(
            r.explain.iter().any(|l| l.contains("staged")),
            "{:?}",
            r.explain
        );
    }

    #[test]
    fn bad_values_are_usage_errors_naming_value_and_forms() {
        for (args, value, forms) in [
            (
                vec!["--nic-rate", "400", "--pcie", "gen9x16"],
                "gen9x16",
                "gen<1-6>x",
            ),
            (
                vec!["--nic-rate", "400", "--pcie", "gen5x16", "--mtu", "1000"],
                "1000",
                "4096",
            ),
            (
                vec!["--nic-rate", "400", "--pcie", "gen5x16", "--mps", "300"],
                "300",
                "128, 256",
            ),
            (
                vec!["--nic-rate", "fast", "--pcie", "gen5x16"],
                "fast",
                "400G",
            ),
            (
                vec![
                    "--nic-rate",
                    "400",
                    "--pcie",
                    "gen5x16",
                    "--link-layer",
                    "fc",
                ],
                "fc",
                "roce",
            ),
        ] {
            let err = parse(&args).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{args:?}");
            let text = err.to_string();
            assert!(
                text.contains(value) && text.contains(forms),
                "{args:?}: {text}"
            );
        }
    }
}
