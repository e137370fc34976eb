//! Large inputs made up for the scale tests and the benches (`benches/fleet.rs` includes this
//! file): sweep records of any number of ranks and NCCL logs of any number of ranks and NICs,
//! written as the product writes or NCCL prints them.

#![allow(dead_code)] // each test uses what it needs

use std::fmt::Write as _;

/// A sweep record of `ranks` ranks (8 a node), `quick`-like: every rank with its next three
/// (write-bw and write-lat each). `slow`: a rank whose pairs measure half the bandwidth and
/// twice the latency, with newer firmware (the sweep after a bad roll-out). `device`: each
/// rank's device name from its rank (the hostile tests give one a name of their own).
pub fn sweep(ranks: usize, slow: Option<usize>, device: &dyn Fn(usize) -> String) -> String {
    let mut out = String::with_capacity(ranks * 1600);
    out.push_str(
        r#"{"schema":"rdmabench.cluster/1","tool":{"version":"0.1.0","git":null},"started_at":"2026-12-02T07:19:29Z","launcher":"Slurm (srun)","pattern":"quick","tests":["write-bw","write-lat"],"min_pct":80.0,"max_lat_factor":2.0,"ranks":["#,
    );
    for r in 0..ranks {
        let fw = if Some(r) == slow {
            "28.40.1000"
        } else {
            "28.39.1002"
        };
        let dev = json_string(&device(r));
        let _ = write!(
            out,
            r#"{}{{"rank":{r},"host":"node{}","device":{dev},"fw_ver":"{fw}","label":""}}"#,
            if r > 0 { "," } else { "" },
            r / 8
        );
    }
    out.push_str(r#"],"schedule":[],"pairs":["#);
    let mut first = true;
    for step in 1..=3 {
        for server in 0..ranks {
            let client = (server + step) % ranks;
            for (test, unit, median) in [("write-bw", "GB/s", 46.0), ("write-lat", "us", 3.0)] {
                let scatter = 1.0 + ((server * 7 + client * 13) % 100) as f64 / 1000.0 - 0.05;
                let mut value = median * scatter;
                if slow.is_some_and(|s| s == server || s == client) {
                    value = if unit == "us" {
                        value * 2.0
                    } else {
                        value / 2.0
                    };
                }
                let pct = value / median * 100.0;
                let _ = write!(
                    out,
                    r#"{}{{"round":{},"client":{client},"server":{server},"test":"{test}","value":{value},"unit":"{unit}","pct_of_median":{pct},"client_counters":{{}},"server_counters":{{}}}}"#,
                    if first { "" } else { "," },
                    step - 1
                );
                first = false;
            }
        }
    }
    let pairs = ranks * 3;
    let _ = write!(
        out,
        r#"],"fleet":[{{"test":"write-bw","unit":"GB/s","pairs":{pairs},"median":46.0,"min":1.0,"max":50.0,"ceiling_gbps":50.0,"spread":null,"suspect_bar":36.8}},{{"test":"write-lat","unit":"us","pairs":{pairs},"median":3.0,"min":1.0,"max":9.0,"ceiling_gbps":null,"spread":null,"suspect_bar":6.0}}],"named":[],"status":"complete"}}"#
    );
    out
}

/// `text` as a JSON string, quoted and escaped.
fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The device name of rank `r` on its node.
pub fn mlx5(r: usize) -> String {
    format!("mlx5_{}", r % 8)
}

/// An NCCL_DEBUG=INFO log: `gpus` processes of one GPU each (8 a host), `ranks` communicator
/// ranks spread over them in turn, every process listing `nics` NICs and sending over each
/// through host memory (no GDRDMA), NCCL saying why for the first.
pub fn nccl_log(gpus: usize, ranks: usize, nics: usize) -> String {
    let mut out = String::new();
    let line = |out: &mut String, g: usize, msg: &str| {
        let _ = writeln!(
            out,
            "node{}:{}:{} [0] NCCL INFO {msg}",
            g / 8,
            1000 + g,
            2000 + g
        );
    };
    for r in 0..ranks {
        let g = r % gpus;
        let msg = format!(
            "comm 0x7f{g:x} rank {r} nranks {ranks} cudaDev 0 nvmlDev 0 busId 1b000 commId 0x1 - Init START"
        );
        line(&mut out, g, &msg);
    }
    for g in 0..gpus {
        let mut list = String::from("NET/IB : Using");
        for k in 0..nics {
            let _ = write!(list, " [{k}]mlx5_{k}:1/IB");
        }
        list.push_str(" [RO]; OOB eth0:10.0.0.1<0>");
        line(&mut out, g, &list);
        line(
            &mut out,
            g,
            "NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)",
        );
        for k in 0..nics {
            let msg = format!(
                "Channel {:02}/0 : {g}[1b000] -> {}[1b000] [send] via NET/IB/{k}",
                k % 32,
                (g + 1) % ranks.max(1)
            );
            line(&mut out, g, &msg);
        }
    }
    out
}

/// An incast sweep's record (`--pattern incast --fan-in K`, every rank receiving in turn) of
/// `ranks` ranks (8 a node) as rank 0 keeps it: a group per receiver, its `fan_in` senders the
/// ranks after it, each flow's GB/s and the receiver's congestion counters.
pub fn incast(ranks: usize, fan_in: usize) -> String {
    let mut out = String::with_capacity(ranks * (300 + fan_in * 200));
    out.push_str(
        r#"{"schema":"rdmabench.cluster/1","tool":{"version":"0.1.0","git":null},"started_at":"2026-12-02T07:19:29Z","launcher":"Slurm (srun)","pattern":"incast","tests":["write-bw"],"min_pct":80.0,"max_lat_factor":2.0,"ranks":["#,
    );
    for r in 0..ranks {
        let _ = write!(
            out,
            r#"{}{{"rank":{r},"host":"node{}","device":"{}","fw_ver":"28.39.1002","label":"{} of node{}"}}"#,
            if r > 0 { "," } else { "" },
            r / 8,
            mlx5(r),
            mlx5(r),
            r / 8
        );
    }
    out.push_str(r#"],"schedule":[],"pairs":[],"groups":["#);
    for r in 0..ranks {
        let _ = write!(
            out,
            r#"{}{{"round":{},"test":"write-bw","receivers":[{r}],"flows":["#,
            if r > 0 { "," } else { "" },
            r % (fan_in + 1)
        );
        for i in 1..=fan_in {
            let _ = write!(
                out,
                r#"{}{{"round":0,"client":{},"server":{r},"test":"write-bw","value":{},"unit":"GB/s"}}"#,
                if i > 1 { "," } else { "" },
                (r + i) % ranks,
                40.0 / fan_in as f64
            );
        }
        let _ = write!(
            out,
            r#"],"total_gbps":40.0,"ceiling_gbps":48.0,"pct_of_ceiling":83.3,"fairness":1.0,"receiver_counters":{{"{r}":{{"hw_counters/np_cnp_sent":3,"counters/port_xmit_wait":10}}}}}}"#
        );
    }
    out.push_str(r#"],"fleet":[],"named":[],"status":"complete"}"#);
    out
}
