//! The test plan: every parameter of a run, validated together, and the server's rule for
//! adopting the client's plan (refuse only a value it was given explicitly that differs).
//! The plan's parameters, defaults, rules and adoption are one contract between the sides;
//! its tests are `plan/tests.rs`.

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
        return Err(PlanError::Value(format!(
            "{flag} {v} is out of range: valid values are {lo} to {hi}"
        )));
    }
    Ok(())
}

fn refuse(text: String) -> Result<(), PlanError> {
    Err(PlanError::Value(text))
}

/// `value` as JSON, as the wire and the catalogue's checks read it.
fn json_of<T: Serialize>(value: &T) -> Result<serde_json::Value, PlanError> {
    serde_json::to_value(value).map_err(|e| PlanError::Value(e.to_string()))
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
                return Err(PlanError::Value(format!(
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
            return Err(PlanError::Value(format!(
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
            return Err(PlanError::Value(format!(
                "plan mismatch ({}); give both sides the same values or leave them off the server",
                diffs.join("; ")
            )));
        }
        client.check()?;
        Ok(client)
    }
}

#[cfg(test)]
mod tests;
