//! The test plan: every parameter of a run, validated together, and the server's rule for
//! adopting the client's plan (refuse only a value it was given explicitly that differs).
//!
//! Long because a third is tests: the plan's parameters, defaults, rules and adoption are one
//! contract between the sides.

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::catalogue::{Agree, PARAMS};
pub use crate::kinds::{AtomicOp, Connection, Mode, Role, Stop, TestKind, Verb};
pub use crate::limits::*;
use crate::units::{
    format_size, parse_class, parse_rate, parse_secs, parse_size, parse_size_u32, RateUnit,
};
pub use crate::usage::PlanError;

/// Everything both sides must agree on. The client's plan is the one that runs.
///
/// It is the wire's plan message, and the wire is strict by construction: an unknown field
/// is refused (`deny_unknown_fields`), and so is a missing one, optional ones included (each
/// `Option` is read with `Option::deserialize`, which has no default). So a peer that does
/// not know a parameter refuses a plan that has it, naming it, instead of running without
/// it; a test below removes each field in turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestPlan {
    /// Which test.
    pub test: TestKind,
    /// Message sizes in bytes, in the order they run.
    pub sizes: Vec<u64>,
    /// Operations per QP and size (iteration runs).
    pub iters: u64,
    /// Seconds per size (duration runs); `None` runs `iters` operations.
    #[serde(deserialize_with = "Option::deserialize")]
    pub duration: Option<f64>,
    /// `--interval`: seconds per interval of a duration run's window (bandwidth tests);
    /// `None`: the window as one.
    #[serde(deserialize_with = "Option::deserialize")]
    pub interval: Option<f64>,
    /// Number of QPs.
    pub qps: u32,
    /// Operations in flight per QP.
    pub tx_depth: u32,
    /// Receives kept posted per QP (SEND tests).
    pub rx_depth: u32,
    /// Messages up to this many bytes are sent inline.
    pub inline: u32,
    /// Work requests per doorbell.
    pub post_list: u32,
    /// One completion is requested every this many work requests.
    pub cq_mod: u32,
    /// Transport.
    pub connection: Connection,
    /// Both sides send at once (bandwidth tests).
    pub bidirectional: bool,
    /// Path MTU asked for; `None` uses the ports' active MTU.
    #[serde(deserialize_with = "Option::deserialize")]
    pub path_mtu: Option<u32>,
    /// `-o`: READs/atomics a QP may have outstanding at the responder; `None` takes what
    /// both devices allow.
    #[serde(deserialize_with = "Option::deserialize")]
    pub outs: Option<u32>,
    /// `-u`: RC acknowledgement timeout, 4.096 us * 2^N a try; `None` takes each device's
    /// default (`engine::qp_timeout_for`).
    #[serde(deserialize_with = "Option::deserialize")]
    pub qp_timeout: Option<u8>,
    /// `--tclass`: the GRH's traffic class (RoCE v2: the IP TOS byte); `None` sends 0.
    #[serde(deserialize_with = "Option::deserialize")]
    pub tclass: Option<u8>,
    /// `-R`: the QPs connect through the RDMA CM (RC).
    pub rdma_cm: bool,
    /// `--srq`: a receiving side's QPs take their receives from one shared receive queue of
    /// `rx_depth` (SEND tests).
    pub srq: bool,
    /// `--rate-limit`: GB/s this side posts at most (bandwidth tests); `None`: as fast as it
    /// can.
    #[serde(deserialize_with = "Option::deserialize")]
    pub rate_limit: Option<f64>,
    /// `--sl`: the service level of the QPs' address vectors; `None` sends 0.
    #[serde(deserialize_with = "Option::deserialize")]
    pub sl: Option<u8>,
    /// The atomic operation (atomic tests).
    pub atomic: AtomicOp,
    /// Check the payload after each size.
    pub validate: bool,
    /// Run the whole plan this many times; the record keeps every repetition.
    pub repeat: u32,
    /// `--report-gbits`: both sides print bandwidth in Gb/s (the client's choice, as every
    /// field here; `units::bandwidth_unit`).
    pub report_gbits: bool,
}

/// The test parameters as a side's command line gave them (`None`, `false`: not given):
/// each flag is declared here once, flattened into every test's arguments, sent to no one
/// (the client sends the resolved [`TestPlan`]) and compared by name with the client's plan
/// when a server adopts it, so a field here has the name of its [`TestPlan`] field.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, Serialize)]
pub struct PlanRequest {
    /// Message size: bytes, or 64K, 1M [default: 64K, latency tests 2]
    ///
    /// Message size in bytes; accepts K, M and G suffixes (64K, 1M) [default: 64K, latency 2]
    #[arg(short = 's', long = "size", value_parser = parse_size, conflicts_with = "all", value_name = "SIZE")]
    pub size: Option<u64>,

    /// Sweep sizes 2 B .. 8 MiB in powers of two
    #[arg(short = 'a', long = "all")]
    pub all: bool,

    /// Operations per QP and size [default: 5000, latency 1000]
    #[arg(
        short = 'n',
        long = "iters",
        value_name = "N",
        conflicts_with = "duration"
    )]
    pub iters: Option<u64>,

    /// Run each size for SECS (or 10s, 2m) instead of -n iterations
    ///
    /// Run each size for SECS (seconds, or 10s, 500ms, 2m) instead of -n iterations (a tenth,
    /// at most 2 s, is left out of the measured window at each end)
    #[arg(short = 'D', long = "duration", value_name = "SECS", value_parser = parse_secs)]
    pub duration: Option<f64>,

    /// With -D: also the bandwidth of every SECS of the window
    ///
    /// With -D, also report the bandwidth of every SECS (seconds, or 500ms) of the measured
    /// window, its worst interval and their coefficient of variation (bandwidth tests; 0.1 s
    /// or more)
    #[arg(long = "interval", value_name = "SECS", requires = "duration", value_parser = parse_secs)]
    pub interval: Option<f64>,

    /// Transport: RC, UC (WRITE, SEND) or UD (SEND) [default: RC]
    ///
    /// Transport: RC, UC (WRITE and SEND) or UD (SEND, one packet per message)
    #[arg(short = 'c', long = "connection", value_name = "RC|UC|UD", value_parser = Connection::parse)]
    pub connection: Option<Connection>,

    /// Receives kept posted per QP (SEND tests) [default: 512]
    #[arg(short = 'r', long = "rx-depth", value_name = "N")]
    pub rx_depth: Option<u32>,

    /// Both sides send at once; each measures what it sends
    ///
    /// Both sides send at once; each measures what it sends (bandwidth tests)
    #[arg(short = 'b', long = "bidirectional")]
    pub bidirectional: bool,

    /// Path MTU: 256 .. 4096 [default: the ports' active MTU]
    ///
    /// Path MTU: 256, 512, 1024, 2048 or 4096 [default: the ports' active MTU]
    #[arg(short = 'm', long = "mtu", value_name = "BYTES")]
    pub path_mtu: Option<u32>,

    /// Outstanding READs/atomics per QP [default: what both allow]
    ///
    /// READs/atomics a QP keeps outstanding at the responder (read and atomic tests; a
    /// ConnectX allows 16) [default: what both devices allow]
    #[arg(short = 'o', long = "outs", value_name = "N")]
    pub outs: Option<u32>,

    /// RC ack timeout, 4.096 us * 2^N a try [default: 14, rxe 18 but READ]
    ///
    /// RC acknowledgement timeout: 4.096 us * 2^N a try (1..31) [default: 14, on a software
    /// device such as rxe 18 but for READs]
    #[arg(short = 'u', long = "qp-timeout", value_name = "N")]
    pub qp_timeout: Option<u8>,

    /// Traffic class (RoCE v2: the TOS byte), 0..255 or 0x68
    ///
    /// Traffic class of the GRH, 0..255 or hex (0x68): on RoCE v2 the IP TOS byte (DSCP = N >> 2,
    /// ECN = N & 3), so that a run lands in the fabric's lossless (PFC) class, e.g. 106 for
    /// DSCP 26; on InfiniBand it needs -x [default: 0]
    #[arg(long = "tclass", value_name = "N", value_parser = parse_class)]
    pub tclass: Option<u8>,

    /// Connect the QPs through the RDMA CM, as perftest's -R
    ///
    /// Connect the QPs through the RDMA connection manager (librdmacm), as perftest's -R; the
    /// control channel still carries the plan (RC only)
    #[arg(short = 'R', long = "rdma-cm")]
    pub rdma_cm: bool,

    /// SEND tests: receive from one shared receive queue
    ///
    /// SEND tests: a receiving side's QPs take their receives from one shared receive queue of
    /// -r receives in all (perftest's --use-srq)
    #[arg(long = "srq", alias = "use-srq")]
    pub srq: bool,

    /// Pace the posts to at most RATE: Gb/s, or 10Gb, 3GB
    ///
    /// Pace the posts in software to at most RATE (bandwidth tests; each sending side, all QPs
    /// together): a bare number is Gb/s, as perftest's --rate_limit; or 10Gb, 5Gbps, 3GB, 25GB/s
    #[arg(long = "rate-limit", value_name = "RATE", value_parser = parse_gbits_rate)]
    pub rate_limit: Option<f64>,

    /// Service level, 0..15 [default: 0]
    ///
    /// Service level, 0..15: on InfiniBand the virtual lane the subnet manager maps it to; on
    /// RoCE a ConnectX's 802.1p priority of VLAN-tagged frames (docs/running.md) [default: 0]
    #[arg(short = 'S', long = "sl", value_name = "N")]
    pub sl: Option<u8>,

    /// Atomic op: FETCH_AND_ADD or CMP_AND_SWAP [default: FETCH_AND_ADD]
    ///
    /// Atomic operation of the atomic tests: FETCH_AND_ADD or CMP_AND_SWAP [default: FETCH_AND_ADD]
    #[arg(short = 'A', long = "atomic-type", value_name = "TYPE", value_parser = AtomicOp::parse)]
    pub atomic: Option<AtomicOp>,

    /// Number of QPs (1..1024) [default: 1]
    #[arg(short = 'q', long = "qps", value_name = "N")]
    pub qps: Option<u32>,

    /// Operations in flight per QP [default: 128]
    #[arg(short = 't', long = "tx-depth", value_name = "N")]
    pub tx_depth: Option<u32>,

    /// Send messages up to BYTES inline [default: see --help]
    ///
    /// Send messages up to this many bytes inline [default: latency tests with host memory:
    /// perftest's (WRITE 220, SEND 236, UD SEND 188) capped by what the client's device allows;
    /// otherwise 0, off]
    #[arg(short = 'I', long = "inline-size", value_name = "BYTES", value_parser = parse_size_u32)]
    pub inline: Option<u32>,

    /// Work requests per doorbell [default: 1]
    #[arg(short = 'l', long = "post-list", value_name = "N")]
    pub post_list: Option<u32>,

    /// A completion every N operations [default: -t/2 (64), at most 100]
    ///
    /// Request a completion every N operations [default: the lesser of 100 and half of -t
    /// (so 64 at the default -t of 128), and less when -l is large]
    #[arg(short = 'Q', long = "cq-mod", value_name = "N")]
    pub cq_mod: Option<u32>,

    /// Check the payload that arrived after each size
    ///
    /// Check the payload that arrived after each size (the run fails on a wrong byte)
    #[arg(long)]
    pub validate: bool,

    /// Run the whole plan N times; the table shows medians
    ///
    /// Run the whole plan N times; the record keeps every repetition, the table their medians
    #[arg(long, value_name = "N")]
    pub repeat: Option<u32>,

    /// Report bandwidth in Gb/s instead of GB/s
    ///
    /// Report bandwidth in Gb/s instead of GB/s (the client's choice holds on both sides)
    #[arg(long, alias = "report_gbits")]
    pub report_gbits: bool,
}

/// `--rate-limit`'s value in GB/s, a bare number in Gb/s (perftest's `--rate_limit`).
fn parse_gbits_rate(text: &str) -> Result<f64, String> {
    parse_rate(text, RateUnit::Gbits)
}

/// The sizes a server's `-s` or `-a` asks for, as [`TestPlan::sizes_text`] says them.
fn server_sizes(server: &PlanRequest, client: &TestPlan) -> Option<String> {
    if server.all {
        let sweep = TestPlan {
            sizes: crate::units::sweep_sizes(),
            ..client.clone()
        };
        return Some(sweep.sizes_text());
    }
    server.size.map(format_size)
}

/// A plan value as a message shows it: strings bare, nothing as "default".
pub fn shown(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "default".to_string(),
        other => other.to_string(),
    }
}

fn check_range<T: PartialOrd + fmt::Display>(
    flag: &str,
    v: T,
    lo: T,
    hi: T,
) -> Result<(), PlanError> {
    if v < lo || v > hi {
        return Err(PlanError(format!(
            "{flag} {v} is out of range: valid values are {lo} to {hi}"
        )));
    }
    Ok(())
}

fn refuse(text: String) -> Result<(), PlanError> {
    Err(PlanError(text))
}

/// `value` as JSON, as the wire and the catalogue's checks read it.
fn json_of<T: Serialize>(value: &T) -> Result<serde_json::Value, PlanError> {
    serde_json::to_value(value).map_err(|e| PlanError(e.to_string()))
}

impl PlanRequest {
    /// Fills in defaults and checks every rule, all values together.
    pub fn resolve(&self, test: TestKind) -> Result<TestPlan, PlanError> {
        let plan = self.fill(test)?;
        plan.check()?;
        Ok(plan)
    }

    /// The plan with defaults where nothing was given, unchecked.
    fn fill(&self, test: TestKind) -> Result<TestPlan, PlanError> {
        let lat = test.mode == Mode::Lat;
        let sizes = if test.verb == Verb::Atomic {
            if self.all || self.size.is_some_and(|s| s != ATOMIC_SIZE) {
                let asked = if self.all {
                    "-a".to_string()
                } else {
                    format!("-s {}", self.size.unwrap_or(0))
                };
                return Err(PlanError(format!(
                    "{test} moves {ATOMIC_SIZE} bytes per operation: {asked} is not possible; leave -s out or give -s 8"
                )));
            }
            vec![ATOMIC_SIZE]
        } else if self.all {
            crate::units::sweep_sizes()
        } else {
            vec![self.size.unwrap_or(if lat {
                DEFAULT_SIZE_LAT
            } else {
                DEFAULT_SIZE_BW
            })]
        };
        let tx_depth = self.tx_depth.unwrap_or(DEFAULT_TX_DEPTH);
        let post_list = self.post_list.unwrap_or(1);
        // A completion at most every half queue, so that the queue never drains before the
        // loop sees room in it; and room for a whole post list beyond the unsignaled ones.
        let cq_mod = self.cq_mod.unwrap_or_else(|| {
            DEFAULT_CQ_MOD
                .min(tx_depth / 2)
                .min(tx_depth.saturating_sub(post_list) + 1)
                .max(1)
        });
        Ok(TestPlan {
            test,
            sizes,
            iters: self.iters.unwrap_or(if lat {
                DEFAULT_ITERS_LAT
            } else {
                DEFAULT_ITERS_BW
            }),
            duration: self.duration,
            interval: self.interval,
            qps: self.qps.unwrap_or(1),
            tx_depth,
            rx_depth: self.rx_depth.unwrap_or(DEFAULT_RX_DEPTH),
            inline: self.inline.unwrap_or(0),
            post_list,
            cq_mod,
            connection: self.connection.unwrap_or(Connection::Rc),
            bidirectional: self.bidirectional,
            path_mtu: self.path_mtu,
            outs: self.outs,
            qp_timeout: self.qp_timeout,
            tclass: self.tclass,
            sl: self.sl,
            rate_limit: self.rate_limit,
            rdma_cm: self.rdma_cm,
            srq: self.srq,
            atomic: self.atomic.unwrap_or(AtomicOp::FetchAdd),
            validate: self.validate,
            repeat: self.repeat.unwrap_or(1),
            report_gbits: self.report_gbits,
        })
    }
}

impl TestPlan {
    /// Checks the rules that hold whatever the device.
    pub fn check(&self) -> Result<(), PlanError> {
        for &s in &self.sizes {
            check_range("--size", s, 1, MAX_SIZE)?;
        }
        self.check_catalogue()?;
        if self.srq && self.validate {
            return refuse(
                "--srq with --validate is not possible: with a shared receive queue a message \
                 lands in whichever receive comes first, not in its QP's buffer, so its payload \
                 cannot be checked; leave one of them out"
                    .to_string(),
            );
        }
        if self.srq && self.qps > self.rx_depth {
            return refuse(format!(
                "--srq with --qps {} needs --rx-depth of at least {} (the shared queue holds \
                 -r receives for all QPs; it is {})",
                self.qps, self.qps, self.rx_depth
            ));
        }
        if let Some(r) = self.rate_limit {
            if !(r.is_finite() && r > 0.0 && r <= 1e4) {
                return refuse(format!(
                    "--rate-limit {r} is out of range: give GB/s, more than 0 and at most 10000"
                ));
            }
        }
        if let Some(d) = self.duration {
            if !(d.is_finite() && d > 0.0 && d <= 86_400.0) {
                return refuse(format!(
                    "--duration {d} is out of range: give seconds, more than 0 and at most 86400"
                ));
            }
        }
        self.check_interval()?;
        check_range("--post-list", self.post_list, 1, self.tx_depth)?;
        check_range("--cq-mod", self.cq_mod, 1, self.tx_depth)?;
        if let Some(m) = self.path_mtu {
            if !PATH_MTUS.contains(&m) {
                return refuse(format!(
                    "--mtu {m} is not a valid MTU: use 256, 512, 1024, 2048 or 4096"
                ));
            }
        }
        // Unsignaled requests hold send-queue slots until a later signaled one completes:
        // without room for a whole post list beyond cq_mod - 1 of them the loop would stall.
        if self.cq_mod + self.post_list - 1 > self.tx_depth {
            return refuse(format!(
                "--cq-mod {} with --post-list {} needs --tx-depth of at least {} (it is {}): \
                 lower --cq-mod or raise --tx-depth",
                self.cq_mod,
                self.post_list,
                self.cq_mod + self.post_list - 1,
                self.tx_depth
            ));
        }
        self.check_verb_and_transport()
    }

    /// `--interval`: within a `-D` window, at least [`MIN_INTERVAL`] seconds, and at most
    /// [`MAX_INTERVALS`] of them; one window (not `--repeat`'s medians of several).
    fn check_interval(&self) -> Result<(), PlanError> {
        let Some(i) = self.interval else {
            return Ok(());
        };
        let Some(d) = self.duration else {
            return refuse(format!(
                "--interval {i} cuts a -D run's window: add -D SECS (an iteration run has no \
                 planned length to cut)"
            ));
        };
        let window = Stop::for_duration(d)
            .window()
            .map_or(0.0, |w| w.as_secs_f64());
        if !(i.is_finite() && i >= MIN_INTERVAL && i <= window) {
            return refuse(format!(
                "--interval {i} is out of range: give seconds, at least {MIN_INTERVAL} and at \
                 most the measured window of -D {d} ({window:.3} s: a tenth, at most 2 s, is \
                 left out at each end)"
            ));
        }
        if window / i > MAX_INTERVALS as f64 {
            return refuse(format!(
                "--interval {i} cuts the {window:.3} s window of -D {d} into more than \
                 {MAX_INTERVALS} intervals: give at least {:.3}",
                window / MAX_INTERVALS as f64
            ));
        }
        if self.repeat > 1 {
            return refuse(format!(
                "--interval {i} follows one window over time; with --repeat {} the figures are \
                 medians of several windows: leave one of them out",
                self.repeat
            ));
        }
        Ok(())
    }

    /// The catalogue's rules for every planned parameter: a whole number within its range,
    /// and none given (a value other than its default) to a test it does not apply to.
    fn check_catalogue(&self) -> Result<(), PlanError> {
        let plan = json_of(self)?;
        let default = json_of(&PlanRequest::default().fill(self.test)?)?;
        for p in PARAMS.iter().filter(|p| p.agree == Agree::Plan) {
            let value = &plan[p.key];
            if let (Some((lo, hi)), Some(v)) = (p.range, value.as_u64()) {
                check_range(p.name(), v, lo, hi)?;
            }
            if *value != default[p.key] && !(p.applies.to)(self.test, self.connection) {
                let over = match self.connection {
                    Connection::Rc => String::new(),
                    other => format!(" over {}", other.name()),
                };
                // A switch is named alone ("--validate"), a value with its flag.
                let given = match value {
                    serde_json::Value::Bool(true) => String::new(),
                    other => format!(" {}", shown(other)),
                };
                return refuse(format!(
                    "{}{given} does not apply to {}{over}: {}",
                    p.name(),
                    self.test,
                    p.applies.why
                ));
            }
        }
        Ok(())
    }

    fn check_verb_and_transport(&self) -> Result<(), PlanError> {
        let test = self.test;
        match (self.connection, test.verb) {
            (Connection::Ud, Verb::Send) | (Connection::Uc, Verb::Write | Verb::Send) | (Connection::Rc, _) => {}
            (Connection::Ud, _) => {
                return refuse(format!(
                    "{test} is not possible over UD: UD carries SEND only (send-bw, send-lat); use -c RC"
                ))
            }
            (Connection::Uc, _) => {
                return refuse(format!(
                    "{test} is not possible over UC: UC carries WRITE and SEND only; use -c RC"
                ))
            }
        }
        if self.bidirectional && test.verb == Verb::Send && self.connection != Connection::Rc {
            return refuse(format!(
                "-b with {test} over {} is not supported: a lost message could not be told from a late \
                 one on both sides at once; use -c RC for bidirectional SEND",
                self.connection.name()
            ));
        }
        if let Some(o) = self.outs {
            // Above 1, the devices' own limit decides (at most 255, the QP attribute's 8
            // bits): it is named when they open (engine::check_outs).
            if o == 0 {
                return refuse(
                    "--outs 0 is out of range: valid values are 1 up to what the devices allow \
                     (a ConnectX allows 16); or leave it out to take what both devices allow"
                        .to_string(),
                );
            }
        }
        Ok(())
    }

    /// The largest message size in the plan.
    pub fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(0)
    }

    /// True when this side receives SENDs: the server in a SEND test, both with `-b`.
    pub fn receives(&self, role: Role) -> bool {
        self.test.verb == Verb::Send
            && (role == Role::Server || self.bidirectional || self.test.mode == Mode::Lat)
    }

    /// True when this side posts the test's operations: the client, both with `-b`.
    pub fn sends(&self, role: Role) -> bool {
        role == Role::Client || self.bidirectional
    }

    /// How the sizes read in a message: "64 KiB" or "a sweep (2 B .. 8 MiB)".
    pub fn sizes_text(&self) -> String {
        match self.sizes.as_slice() {
            [one] => format_size(*one),
            many => format!(
                "a sweep ({} .. {})",
                format_size(many.first().copied().unwrap_or(0)),
                format_size(self.max_size())
            ),
        }
    }

    /// The server's rule: adopt the client's plan unless a value the server was given
    /// explicitly differs; the error names both values.
    pub fn adopt(
        client: TestPlan,
        server_test: TestKind,
        server: &PlanRequest,
    ) -> Result<TestPlan, PlanError> {
        if client.test != server_test {
            return Err(PlanError(format!(
                "plan mismatch: the server runs {server_test} but the client asked for {}",
                client.test
            )));
        }
        let mut diffs = Vec::new();
        if let Some(sizes) = server_sizes(server, &client) {
            if sizes != client.sizes_text() {
                diffs.push(format!(
                    "size: server {sizes}, client {}",
                    client.sizes_text()
                ));
            }
        }
        let given = json_of(server)?;
        let plan = json_of(&client)?;
        for p in PARAMS.iter().filter(|p| p.agree == Agree::Plan) {
            let value = &given[p.key];
            let explicit = !(value.is_null() || *value == serde_json::Value::Bool(false));
            if !explicit || plan[p.key] == *value {
                continue;
            }
            diffs.push(format!(
                "{}: server {}, client {}",
                p.name(),
                shown(value),
                shown(&plan[p.key])
            ));
        }
        if !diffs.is_empty() {
            return Err(PlanError(format!(
                "plan mismatch ({}); give both sides the same values or leave them off the server",
                diffs.join("; ")
            )));
        }
        client.check()?;
        Ok(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRITE_BW: TestKind = TestKind::new(Verb::Write, Mode::Bw);

    fn request() -> PlanRequest {
        PlanRequest::default()
    }

    #[test]
    fn defaults_are_perftests() {
        let plan = request().resolve(WRITE_BW).unwrap();
        assert_eq!(plan.sizes, vec![65536]);
        assert_eq!(
            (plan.iters, plan.qps, plan.tx_depth, plan.cq_mod),
            (5000, 1, 128, 64),
            "perftest's 100 would let the queue run down to 28 before a completion frees it"
        );
        let deep = PlanRequest {
            tx_depth: Some(512),
            ..request()
        }
        .resolve(WRITE_BW)
        .unwrap();
        assert_eq!(deep.cq_mod, 100);
        let lat = request()
            .resolve(TestKind::new(Verb::Send, Mode::Lat))
            .unwrap();
        assert_eq!((lat.sizes[0], lat.iters, lat.rx_depth), (2, 1000, 512));
    }

    #[test]
    fn cq_mod_default_shrinks_to_fit_a_small_tx_depth() {
        let plan = PlanRequest {
            tx_depth: Some(16),
            post_list: Some(4),
            ..request()
        }
        .resolve(WRITE_BW)
        .unwrap();
        assert_eq!(plan.cq_mod, 8, "half of 16");
        let plan = PlanRequest {
            tx_depth: Some(16),
            post_list: Some(12),
            ..request()
        }
        .resolve(WRITE_BW)
        .unwrap();
        assert_eq!(
            plan.cq_mod, 5,
            "room for a post list of 12 beyond 4 unsignaled"
        );
    }

    #[test]
    fn outs_caps_reads_and_atomics_only() {
        for verb in [Verb::Read, Verb::Atomic] {
            let plan = PlanRequest {
                outs: Some(16),
                ..request()
            }
            .resolve(TestKind::new(verb, Mode::Bw))
            .unwrap();
            assert_eq!(plan.outs, Some(16));
        }
        let err = PlanRequest {
            outs: Some(16),
            ..request()
        }
        .resolve(WRITE_BW)
        .unwrap_err();
        assert!(
            err.0.contains("--outs 16 does not apply to write-bw"),
            "{err}"
        );
        let err = PlanRequest {
            outs: Some(0),
            ..request()
        }
        .resolve(TestKind::new(Verb::Read, Mode::Bw))
        .unwrap_err();
        assert!(
            err.0.starts_with(
                "--outs 0 is out of range: valid values are 1 up to what the devices allow"
            ),
            "{err}"
        );
        // Above 1 the devices' limit decides, and is named when they open: -o 1000 as -o 200.
        let plan = PlanRequest {
            outs: Some(1000),
            ..request()
        }
        .resolve(TestKind::new(Verb::Read, Mode::Bw))
        .unwrap();
        assert_eq!(plan.outs, Some(1000));
    }

    #[test]
    fn qp_timeout_is_rc_only_and_within_the_five_bit_range() {
        let plan = PlanRequest {
            qp_timeout: Some(18),
            ..request()
        }
        .resolve(WRITE_BW)
        .unwrap();
        assert_eq!(plan.qp_timeout, Some(18));
        for (u, want) in [
            (
                0,
                "--qp-timeout 0 is out of range: valid values are 1 to 31",
            ),
            (
                32,
                "--qp-timeout 32 is out of range: valid values are 1 to 31",
            ),
        ] {
            let err = PlanRequest {
                qp_timeout: Some(u),
                ..request()
            }
            .resolve(WRITE_BW)
            .unwrap_err();
            assert_eq!(err.0, want);
        }
        let err = PlanRequest {
            qp_timeout: Some(18),
            connection: Some(Connection::Uc),
            ..request()
        }
        .resolve(WRITE_BW)
        .unwrap_err();
        assert_eq!(
            err.0,
            "--qp-timeout 18 does not apply to write-bw over UC: only RC waits for acknowledgements"
        );
    }

    #[test]
    fn a_stalling_combination_is_refused_with_the_numbers() {
        let err = PlanRequest {
            tx_depth: Some(128),
            cq_mod: Some(100),
            post_list: Some(64),
            ..request()
        }
        .resolve(WRITE_BW)
        .unwrap_err();
        assert!(
            err.0.contains("at least 163") && err.0.contains("128"),
            "{err}"
        );
    }

    #[test]
    fn out_of_range_values_name_the_flag_and_the_range() {
        let err = PlanRequest {
            qps: Some(0),
            ..request()
        }
        .resolve(WRITE_BW)
        .unwrap_err();
        assert_eq!(err.0, "--qps 0 is out of range: valid values are 1 to 1024");
        let err = PlanRequest {
            sl: Some(16),
            ..request()
        }
        .resolve(WRITE_BW)
        .unwrap_err();
        assert_eq!(err.0, "--sl 16 is out of range: valid values are 0 to 15");
        let err = PlanRequest {
            size: Some(0),
            ..request()
        }
        .resolve(WRITE_BW)
        .unwrap_err();
        assert!(err.0.starts_with("--size 0"), "{err}");
        let err = PlanRequest {
            path_mtu: Some(1500),
            ..request()
        }
        .resolve(WRITE_BW)
        .unwrap_err();
        assert!(
            err.0.contains("--mtu 1500") && err.0.contains("4096"),
            "{err}"
        );
        let err = PlanRequest {
            duration: Some(0.0),
            ..request()
        }
        .resolve(WRITE_BW)
        .unwrap_err();
        assert!(err.0.contains("--duration 0"), "{err}");
    }

    #[test]
    fn an_interval_is_refused_outside_one_d_window_naming_what_would_do() {
        let refused = |duration: Option<f64>, interval: f64, repeat: Option<u32>, t: TestKind| {
            PlanRequest {
                duration,
                interval: Some(interval),
                repeat,
                ..request()
            }
            .resolve(t)
            .unwrap_err()
            .0
        };
        let e = refused(None, 1.0, None, WRITE_BW);
        assert!(
            e.contains("--interval 1 cuts a -D run's window: add -D SECS"),
            "{e}"
        );
        // -D 10 measures 8 s: a tenth at each end is left out.
        let e = refused(Some(10.0), 9.0, None, WRITE_BW);
        assert!(e.contains("at least 0.1 and at most the measured window of -D 10 (8.000 s"));
        let e = refused(Some(10.0), 0.05, None, WRITE_BW);
        assert!(e.contains("--interval 0.05 is out of range"), "{e}");
        let e = refused(Some(3600.0), 0.1, None, WRITE_BW);
        assert!(
            e.contains("more than 10000 intervals: give at least 0.360"),
            "{e}"
        );
        let e = refused(Some(10.0), 1.0, Some(3), WRITE_BW);
        assert!(e.contains("with --repeat 3 the figures are medians"), "{e}");
        let e = refused(Some(10.0), 1.0, None, TestKind::new(Verb::Write, Mode::Lat));
        assert!(e.contains("--interval") && e.contains("latency"), "{e}");
        let ok = PlanRequest {
            duration: Some(10.0),
            interval: Some(1.0),
            ..request()
        };
        assert_eq!(ok.resolve(WRITE_BW).unwrap().interval, Some(1.0));
    }

    #[test]
    fn verbs_a_transport_cannot_carry_are_refused_naming_both() {
        for (verb, conn, needle) in [
            (Verb::Read, Connection::Ud, "over UD"),
            (Verb::Write, Connection::Ud, "over UD"),
            (Verb::Atomic, Connection::Uc, "over UC"),
            (Verb::Read, Connection::Uc, "over UC"),
        ] {
            let err = PlanRequest {
                connection: Some(conn),
                ..request()
            }
            .resolve(TestKind::new(verb, Mode::Bw))
            .unwrap_err();
            assert!(err.0.contains(needle), "{err}");
        }
        for (verb, conn) in [
            (Verb::Send, Connection::Ud),
            (Verb::Write, Connection::Uc),
            (Verb::Send, Connection::Uc),
        ] {
            assert!(PlanRequest {
                connection: Some(conn),
                ..request()
            }
            .resolve(TestKind::new(verb, Mode::Bw))
            .is_ok());
        }
    }

    #[test]
    fn atomics_are_eight_bytes() {
        let atomic = TestKind::new(Verb::Atomic, Mode::Bw);
        assert_eq!(request().resolve(atomic).unwrap().sizes, vec![8]);
        let err = PlanRequest {
            size: Some(64),
            ..request()
        }
        .resolve(atomic)
        .unwrap_err();
        assert!(
            err.0.contains("-s 64") && err.0.contains("8 bytes"),
            "{err}"
        );
        assert!(PlanRequest {
            all: true,
            ..request()
        }
        .resolve(atomic)
        .is_err());
    }

    #[test]
    fn latency_tests_are_one_qp_one_direction() {
        let lat = TestKind::new(Verb::Write, Mode::Lat);
        assert!(PlanRequest {
            qps: Some(4),
            ..request()
        }
        .resolve(lat)
        .is_err());
        assert!(PlanRequest {
            bidirectional: true,
            ..request()
        }
        .resolve(lat)
        .is_err());
        assert!(PlanRequest {
            post_list: Some(4),
            ..request()
        }
        .resolve(lat)
        .is_err());
    }

    #[test]
    fn server_adopts_what_it_was_not_given() {
        let client = PlanRequest {
            size: Some(4096),
            qps: Some(4),
            ..request()
        }
        .resolve(WRITE_BW)
        .unwrap();
        let adopted = TestPlan::adopt(client.clone(), WRITE_BW, &request()).unwrap();
        assert_eq!(adopted, client);
    }

    #[test]
    fn server_refuses_a_differing_explicit_value_naming_both() {
        let client = PlanRequest {
            size: Some(4096),
            ..request()
        }
        .resolve(WRITE_BW)
        .unwrap();
        let server = PlanRequest {
            size: Some(65536),
            ..request()
        };
        let err = TestPlan::adopt(client, WRITE_BW, &server).unwrap_err();
        assert!(
            err.0.contains("server 64 KiB") && err.0.contains("client 4 KiB"),
            "{err}"
        );
        let client = request().resolve(WRITE_BW).unwrap();
        let server = PlanRequest {
            connection: Some(Connection::Uc),
            ..request()
        };
        let err = TestPlan::adopt(client, WRITE_BW, &server).unwrap_err();
        assert!(err.0.contains("connection: server UC, client RC"), "{err}");
    }

    #[test]
    fn the_server_prints_in_the_clients_unit() {
        // The client asked for Gb/s; a server that did not say adopts it.
        let client = PlanRequest {
            report_gbits: true,
            ..request()
        }
        .resolve(WRITE_BW)
        .unwrap();
        let adopted = TestPlan::adopt(client.clone(), WRITE_BW, &request()).unwrap();
        assert!(adopted.report_gbits);
        // A server given Gb/s when the client is not: refused, as any differing parameter.
        let server = PlanRequest {
            report_gbits: true,
            ..request()
        };
        let plain = request().resolve(WRITE_BW).unwrap();
        let err = TestPlan::adopt(plain, WRITE_BW, &server).unwrap_err();
        assert!(
            err.0.contains("--report-gbits: server true, client false"),
            "{err}"
        );
    }

    #[test]
    fn the_wire_refuses_a_plan_with_a_field_missing_or_unknown() {
        // Every field, optional ones included: a peer that lacks one refuses, naming it.
        let plan = PlanRequest {
            outs: Some(16),
            ..request()
        }
        .resolve(TestKind::new(Verb::Read, Mode::Bw))
        .unwrap();
        let full = serde_json::to_value(&plan).unwrap();
        let back: TestPlan = serde_json::from_value(full.clone()).unwrap();
        assert_eq!(back, plan);
        for key in full.as_object().unwrap().keys() {
            let mut less = full.clone();
            less.as_object_mut().unwrap().remove(key);
            let err = serde_json::from_value::<TestPlan>(less).unwrap_err();
            assert!(
                err.to_string().contains(&format!("missing field `{key}`")),
                "{err}"
            );
        }
        let mut more = full;
        more["tclass_from_the_future"] = serde_json::json!(106);
        let err = serde_json::from_value::<TestPlan>(more).unwrap_err();
        assert!(
            err.to_string()
                .contains("unknown field `tclass_from_the_future`"),
            "{err}"
        );
    }

    #[test]
    fn every_flag_the_server_may_give_is_compared_by_name() {
        // A request field that is not a planned parameter of the catalogue, or has no plan
        // field of the same name, would never be compared.
        let plan = serde_json::to_value(request().resolve(WRITE_BW).unwrap()).unwrap();
        let given = serde_json::to_value(request()).unwrap();
        for key in given.as_object().unwrap().keys() {
            if key != "size" && key != "all" {
                let row = crate::catalogue::param(key);
                assert!(
                    row.is_some_and(|p| p.agree == Agree::Plan),
                    "PlanRequest.{key} is not a planned parameter of the catalogue"
                );
                assert!(
                    plan.get(key).is_some(),
                    "PlanRequest.{key} is not in TestPlan"
                );
            }
        }
        let client = PlanRequest {
            tx_depth: Some(64),
            atomic: Some(AtomicOp::CompareSwap),
            ..request()
        }
        .resolve(TestKind::new(Verb::Atomic, Mode::Bw))
        .unwrap();
        let server = PlanRequest {
            tx_depth: Some(32),
            atomic: Some(AtomicOp::FetchAdd),
            validate: true,
            ..request()
        };
        let err =
            TestPlan::adopt(client, TestKind::new(Verb::Atomic, Mode::Bw), &server).unwrap_err();
        for needle in [
            "--tx-depth: server 32, client 64",
            "--atomic-type: server FETCH_AND_ADD, client CMP_AND_SWAP",
            "--validate: server true, client false",
        ] {
            assert!(err.0.contains(needle), "{needle}: {err}");
        }
    }

    #[test]
    fn a_different_test_is_refused() {
        let client = request()
            .resolve(TestKind::new(Verb::Read, Mode::Bw))
            .unwrap();
        let err = TestPlan::adopt(client, WRITE_BW, &request()).unwrap_err();
        assert!(
            err.0.contains("server runs write-bw") && err.0.contains("read-bw"),
            "{err}"
        );
    }

    #[test]
    fn an_equal_explicit_value_is_fine() {
        let client = PlanRequest {
            qps: Some(4),
            ..request()
        }
        .resolve(WRITE_BW)
        .unwrap();
        let server = PlanRequest {
            qps: Some(4),
            ..request()
        };
        assert!(TestPlan::adopt(client, WRITE_BW, &server).is_ok());
    }
}
