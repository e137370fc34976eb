//! The test parameters, each declared once. A row here says how a parameter is typed (its
//! flag and perftest's spelling), who decides it (the client's plan, each side, or the run
//! itself), which tests it means something for, its valid range, how the header labels it
//! and whether it shows there, and what a difference in it means to `compare`. Its key is
//! the same everywhere: the field of [`PlanRequest`](crate::plan::PlanRequest) and
//! [`TestPlan`](crate::plan::TestPlan) (the wire) for a planned one, of the record's
//! `params` ([`ParamsRecord`]), and the CSV's column.
//!
//! What reads this table: the plan's range and applies checks and the server's adoption
//! (`plan.rs`), the run header (`output/header.rs`), the CSV (`report/csv.rs`) and
//! `compare` (`compare/diff.rs`). The tests below prove that every row reaches `--help`,
//! the wire, the record, the header, the CSV and `compare`, and that no field of those
//! types lacks a row: ARCHITECTURE.md's "Adding a parameter" says what to touch.

use crate::kinds::{Connection, Mode, TestKind, Verb};
use crate::record::ParamsRecord;

/// What `compare` makes of two records that differ in a parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compared {
    /// The records are incomparable: a warning.
    Warn,
    /// Information: how long or how often a run ran, or a setting that changes no figure
    /// unless something goes wrong (the acknowledgement timeout).
    Info,
    /// Nothing: it differs from run to run by nature (a calibrated clock rate), or only says
    /// why another parameter has its value (the CPU's placement).
    Skip,
}

/// Who decides a parameter's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agree {
    /// The client's plan ([`TestPlan`](crate::plan::TestPlan), sent on the wire): the
    /// server runs the client's value, and refuses a client whose value differs from one
    /// it was given explicitly.
    Plan,
    /// Each side's own (its memory, its registration, its CPU): given on each side's command
    /// line, never sent, recorded by each side.
    Side,
    /// Not typed: the test the command names, or what the run found (a clock's rate, a NUMA
    /// node, the latency kind of the test).
    Found,
}

/// The tests a parameter means something for; giving it to another is refused with `why`.
#[derive(Debug, Clone, Copy)]
pub struct Applies {
    /// True where it applies.
    pub to: fn(TestKind, Connection) -> bool,
    /// Why it does not apply elsewhere: "it caps outstanding READs and atomics (read-bw, ...)".
    pub why: &'static str,
}

/// Every test.
const EVERY_TEST: Applies = Applies {
    to: |_, _| true,
    why: "",
};

/// The bandwidth tests: a latency test measures one QP ping-pong.
const BANDWIDTH_ONLY: Applies = Applies {
    to: |t, _| t.mode == Mode::Bw,
    why: "a latency test measures one QP ping-pong",
};

/// One parameter.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    /// The plan's field, the record field under `params`, and the CSV column.
    pub key: &'static str,
    /// The long flag ("--tx-depth"); `None` for what is not typed ([`Agree::Found`]).
    pub flag: Option<&'static str>,
    /// perftest's spelling of it, where perftest has it ("-t").
    pub perftest: Option<&'static str>,
    /// Who decides it.
    pub agree: Agree,
    /// The tests it applies to.
    pub applies: Applies,
    /// Its valid values, for a whole number (the flag names them when refused); others check
    /// their own (`TestPlan::check`).
    pub range: Option<(u64, u64)>,
    /// The header's label: at most 13 characters when the header shows it (the width of its
    /// label column), 15 otherwise.
    pub label: &'static str,
    /// Shown in the header's parameter lines (some have a richer line of their own there:
    /// the test is the title, the memory names the GPU, the run its warm-up, the clock its
    /// calibrated rate, the CPUs and NUMA node why they were chosen).
    pub in_header: bool,
    /// What a difference in it means to `compare`.
    pub compare: Compared,
    /// The value as the record holds it, as text; `None` where it does not apply.
    pub value: fn(&ParamsRecord) -> Option<String>,
}

impl Param {
    /// How a message names it: its flag, else its key.
    pub fn name(&self) -> &'static str {
        self.flag.unwrap_or(self.key)
    }
}

fn text<T: ToString>(v: T) -> Option<String> {
    Some(v.to_string())
}

fn opt<T: ToString>(v: Option<T>) -> Option<String> {
    v.map(|v| v.to_string())
}

/// A row with the common settings: planned, every test, no range, in the header, warned.
const PLANNED: Param = Param {
    key: "",
    flag: None,
    perftest: None,
    agree: Agree::Plan,
    applies: EVERY_TEST,
    range: None,
    label: "",
    in_header: true,
    compare: Compared::Warn,
    value: |_| None,
};

/// The row of `key`.
pub fn param(key: &str) -> Option<&'static Param> {
    PARAMS.iter().find(|p| p.key == key)
}

/// Every parameter, in the order the header and the CSV show them.
pub const PARAMS: &[Param] = &[
    Param {
        key: "test",
        agree: Agree::Found,
        label: "Test",
        in_header: false,
        value: |p| text(&p.test),
        ..PLANNED
    },
    Param {
        key: "mem",
        flag: Some("--mem"),
        perftest: Some("--use_cuda"),
        agree: Agree::Side,
        label: "Memory",
        in_header: false,
        value: |p| text(&p.mem),
        ..PLANNED
    },
    Param {
        key: "connection",
        flag: Some("--connection"),
        perftest: Some("-c"),
        label: "Connection",
        value: |p| text(&p.connection),
        ..PLANNED
    },
    Param {
        key: "qps",
        flag: Some("--qps"),
        perftest: Some("-q"),
        applies: BANDWIDTH_ONLY,
        range: Some((1, crate::limits::MAX_QPS as u64)),
        label: "QPs",
        value: |p| text(p.qps),
        ..PLANNED
    },
    Param {
        key: "tx_depth",
        flag: Some("--tx-depth"),
        perftest: Some("-t"),
        range: Some((1, 1 << 16)),
        label: "TX depth",
        value: |p| opt(p.tx_depth),
        ..PLANNED
    },
    Param {
        key: "rx_depth",
        flag: Some("--rx-depth"),
        perftest: Some("-r"),
        range: Some((1, 1 << 16)),
        label: "RX depth",
        value: |p| opt(p.rx_depth),
        ..PLANNED
    },
    Param {
        key: "outs",
        flag: Some("--outs"),
        perftest: Some("-o"),
        applies: Applies {
            to: |t, _| matches!(t.verb, Verb::Read | Verb::Atomic),
            why: "it caps outstanding READs and atomics (read-bw, read-lat, atomic-bw, atomic-lat)",
        },
        label: "Outstanding",
        value: |p| opt(p.outs),
        ..PLANNED
    },
    Param {
        key: "atomic",
        flag: Some("--atomic-type"),
        perftest: Some("-A"),
        applies: Applies {
            to: |t, _| t.verb == Verb::Atomic,
            why: "it is the atomic tests' operation (atomic-bw, atomic-lat)",
        },
        label: "Atomic",
        value: |p| opt(p.atomic.as_ref()),
        ..PLANNED
    },
    Param {
        key: "cq_mod",
        flag: Some("--cq-mod"),
        perftest: Some("-Q"),
        label: "CQ moderation",
        value: |p| opt(p.cq_mod),
        ..PLANNED
    },
    Param {
        key: "post_list",
        flag: Some("--post-list"),
        perftest: Some("-l"),
        applies: Applies {
            to: |t, _| t.mode == Mode::Bw,
            why: "a latency test posts one request at a time",
        },
        label: "Post list",
        value: |p| opt(p.post_list),
        ..PLANNED
    },
    Param {
        key: "inline",
        flag: Some("--inline-size"),
        perftest: Some("-I"),
        applies: Applies {
            to: |t, _| t.verb != Verb::Read,
            why: "READ responses cannot be inline",
        },
        range: Some((0, 1 << 16)),
        label: "Inline bytes",
        value: |p| text(p.inline),
        ..PLANNED
    },
    Param {
        key: "path_mtu",
        flag: Some("--mtu"),
        perftest: Some("-m"),
        label: "Path MTU",
        value: |p| opt(p.path_mtu),
        ..PLANNED
    },
    Param {
        key: "qp_timeout",
        flag: Some("--qp-timeout"),
        perftest: Some("-u"),
        applies: Applies {
            to: |_, c| c == Connection::Rc,
            why: "only RC waits for acknowledgements",
        },
        range: Some((1, crate::limits::MAX_QP_TIMEOUT as u64)),
        label: "QP timeout",
        // Changes no figure unless packets are lost, and then it is what is being compared.
        compare: Compared::Info,
        value: |p| opt(p.qp_timeout),
        ..PLANNED
    },
    Param {
        key: "tclass",
        flag: Some("--tclass"),
        perftest: Some("--tclass"),
        range: Some((0, 255)),
        label: "Traffic class",
        value: |p| opt(p.tclass),
        ..PLANNED
    },
    Param {
        key: "rdma_cm",
        flag: Some("--rdma-cm"),
        perftest: Some("-R"),
        applies: Applies {
            to: |_, c| c == Connection::Rc,
            why: "the RDMA CM connects RC QPs here; use -c RC",
        },
        label: "RDMA CM",
        value: |p| text(p.rdma_cm),
        ..PLANNED
    },
    Param {
        key: "srq",
        flag: Some("--srq"),
        perftest: Some("--use-srq"),
        applies: Applies {
            to: |t, _| t.verb == Verb::Send,
            why: "a shared receive queue holds SEND receives (send-bw, send-lat)",
        },
        label: "Shared RQ",
        value: |p| text(p.srq),
        ..PLANNED
    },
    Param {
        key: "rate_limit",
        flag: Some("--rate-limit"),
        applies: Applies {
            to: |t, _| t.mode == Mode::Bw,
            why: "it paces a bandwidth test's posts; a latency test has one operation in flight",
        },
        label: "Paced to GB/s",
        value: |p| opt(p.rate_limit.map(serde_json::Value::from)),
        ..PLANNED
    },
    Param {
        key: "sl",
        flag: Some("--sl"),
        perftest: Some("-S"),
        range: Some((0, 15)),
        label: "Service level",
        value: |p| text(p.sl),
        ..PLANNED
    },
    Param {
        key: "validate",
        flag: Some("--validate"),
        label: "Validate",
        value: |p| text(p.validate),
        ..PLANNED
    },
    Param {
        key: "relaxed_ordering",
        flag: Some("--disable-pcie-relaxed"),
        perftest: Some("--disable_pcie_relaxed"),
        agree: Agree::Side,
        label: "Relaxed order",
        value: |p| text(p.relaxed_ordering),
        ..PLANNED
    },
    Param {
        key: "hugepages",
        flag: Some("--use-hugepages"),
        perftest: Some("--use-hugepages"),
        agree: Agree::Side,
        label: "Huge pages",
        value: |p| text(p.hugepages),
        ..PLANNED
    },
    Param {
        key: "odp",
        flag: Some("--odp"),
        perftest: Some("--odp"),
        agree: Agree::Side,
        label: "Demand paging",
        value: |p| text(p.odp),
        ..PLANNED
    },
    Param {
        key: "threads",
        flag: Some("--threads"),
        agree: Agree::Side,
        applies: Applies {
            to: |t, _| t.mode == Mode::Bw,
            why: "a latency test measures one QP ping-pong in one thread",
        },
        label: "Threads",
        value: |p| text(p.threads),
        ..PLANNED
    },
    Param {
        key: "clock",
        flag: Some("--clock"),
        agree: Agree::Side,
        applies: Applies {
            to: |t, _| t.mode == Mode::Lat,
            why: "it times a latency test's round trips; a bandwidth test's window is timed \
                  by the monotonic clock",
        },
        label: "Clock",
        in_header: false,
        value: |p| opt(p.clock.as_ref()),
        ..PLANNED
    },
    Param {
        key: "clock_hz",
        agree: Agree::Found,
        label: "Clock rate (Hz)",
        in_header: false,
        compare: Compared::Skip,
        value: |p| opt(p.clock_hz.map(serde_json::Value::from)),
        ..PLANNED
    },
    Param {
        key: "cpus",
        flag: Some("--cpus"),
        agree: Agree::Side,
        label: "CPUs",
        in_header: false,
        value: |p| opt(p.cpus.as_ref()),
        ..PLANNED
    },
    Param {
        key: "numa_node",
        agree: Agree::Found,
        label: "NUMA node",
        in_header: false,
        value: |p| opt(p.numa_node),
        ..PLANNED
    },
    Param {
        key: "placement",
        agree: Agree::Found,
        label: "Placement",
        in_header: false,
        compare: Compared::Skip,
        value: |p| opt(p.placement.as_ref()),
        ..PLANNED
    },
    Param {
        key: "iters",
        flag: Some("--iters"),
        perftest: Some("-n"),
        range: Some((1, u32::MAX as u64)),
        label: "Iterations",
        in_header: false,
        compare: Compared::Info,
        value: |p| opt(p.iters),
        ..PLANNED
    },
    Param {
        key: "warmup",
        agree: Agree::Found,
        label: "Warm-up",
        in_header: false,
        compare: Compared::Info,
        value: |p| opt(p.warmup),
        ..PLANNED
    },
    Param {
        key: "duration",
        flag: Some("--duration"),
        perftest: Some("-D"),
        label: "Duration (s)",
        in_header: false,
        compare: Compared::Info,
        value: |p| opt(p.duration.map(serde_json::Value::from)),
        ..PLANNED
    },
    Param {
        key: "interval",
        flag: Some("--interval"),
        applies: Applies {
            to: |t, _| t.mode == Mode::Bw,
            why: "it cuts a bandwidth test's -D window; a latency test's figures are a histogram",
        },
        label: "Interval (s)",
        compare: Compared::Info,
        value: |p| opt(p.interval.map(serde_json::Value::from)),
        ..PLANNED
    },
    Param {
        key: "bidirectional",
        flag: Some("--bidirectional"),
        perftest: Some("-b"),
        applies: Applies {
            to: |t, _| t.mode == Mode::Bw,
            why: "a latency test is already a round trip",
        },
        label: "Bidirectional",
        in_header: false,
        value: |p| text(p.bidirectional),
        ..PLANNED
    },
    Param {
        key: "latency",
        agree: Agree::Found,
        label: "Latency",
        in_header: false,
        value: |p| opt(p.latency.as_ref()),
        ..PLANNED
    },
    Param {
        key: "repeat",
        flag: Some("--repeat"),
        range: Some((1, 1000)),
        label: "Repeat",
        in_header: false,
        compare: Compared::Info,
        value: |p| text(p.repeat),
        ..PLANNED
    },
    Param {
        key: "report_gbits",
        flag: Some("--report-gbits"),
        perftest: Some("--report_gbits"),
        label: "Report Gb/s",
        in_header: false,
        // The table's unit only: the record's figures are GB/s and Gb/s both.
        compare: Compared::Skip,
        value: |p| text(p.report_gbits),
        ..PLANNED
    },
];

/// The header's parameter lines for `p`: label and value of each that applies.
pub fn header_fields(p: &ParamsRecord) -> Vec<(&'static str, String)> {
    PARAMS
        .iter()
        .filter(|param| param.in_header)
        .filter_map(|param| (param.value)(p).map(|v| (param.label, v)))
        .collect()
}
