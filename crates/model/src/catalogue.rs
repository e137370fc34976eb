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

use crate::declare::params;
use crate::kinds::{AtomicOp, Connection, Mode, TestKind, Verb};
use crate::limits::*;

/// `--latency-gap`'s largest value: a second between round trips.
const MAX_LATENCY_GAP_US: u64 = 1_000_000;

/// `--retry-count`'s default, as perftest's and the most an RC QP takes.
const DEFAULT_RETRY_COUNT: u8 = 7;
use crate::units::{parse_class, parse_rate, parse_secs, parse_size, parse_size_u32, RateUnit};

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
    /// Its JSON type in the record and where it is present, as the schema's table says it:
    /// "integer, bandwidth tests".
    pub record_type: &'static str,
    /// The value as the record holds it, as text; `None` where it does not apply.
    pub value: fn(&ParamsRecord) -> Option<String>,
}

impl Param {
    /// How a message names it: its flag, else its key.
    pub fn name(&self) -> &'static str {
        self.flag.unwrap_or(self.key)
    }
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
    record_type: "",
    value: |_| None,
};

/// The row of `key`.
pub fn param(key: &str) -> Option<&'static Param> {
    PARAMS.iter().find(|p| p.key == key)
}

params! {
    fill(req, test, sizes);
    record(plan);
    request_first {
    /// Message size: bytes, or 64K, 1M [default: 64K, latency tests 2]
    ///
    /// Message size in bytes; accepts K, M and G suffixes (64K, 1M) [default: 64K, latency 2]
    #[arg(short = 's', long = "size", value_parser = parse_size, conflicts_with = "all", value_name = "SIZE")]
    pub size: Option<u64>,

    /// Sweep sizes 2 B .. 8 MiB in powers of two
    #[arg(short = 'a', long = "all")]
    pub all: bool,

    }

    test: Found {
        record_type: "string",
        label: "Test",
        in_header: false,
    }
    record
        /// `write-bw`, `read-bw`, `send-bw`, `atomic-bw`, `write-lat`, `read-lat`, `send-lat` or
        /// `atomic-lat`.
        (String = plan.test.to_string())

    mem: Side {
        record_type: "string",
        flag: Some("--mem"),
        perftest: Some("--use_cuda"),
        label: "Memory",
        in_header: false,
    }
    record
        /// Memory mode: `host`, `cuda:N`, `cuda-staged:N`, `cuda-peermem:N`, `rocm:N`,
        /// `rocm-staged:N`, `rocm-peermem:N` (N a GPU index or PCI bus id).
        (String = String::new())

    connection: Plan {
        record_type: "string",
        flag: Some("--connection"),
        perftest: Some("-c"),
        label: "Connection",
    }
    request
        /// Transport: RC, UC (WRITE, SEND) or UD (SEND) [default: RC]
        ///
        /// Transport: RC, UC (WRITE and SEND) or UD (SEND, one packet per message)
        #[arg(short = 'c', long = "connection", value_name = "RC|UC|UD", value_parser = Connection::parse)]
        (Option<Connection> => Connection = req.connection.unwrap_or(Connection::Rc))
    record
        /// Transport: `RC`, `UC` or `UD`.
        (String = plan.connection.name().to_string())

    qps: Plan {
        record_type: "integer",
        flag: Some("--qps"),
        perftest: Some("-q"),
        applies: BANDWIDTH_ONLY,
        range: Some((1, crate::limits::MAX_QPS as u64)),
        label: "QPs",
    }
    request
        /// Number of QPs (1..1024) [default: 1]
        #[arg(short = 'q', long = "qps", value_name = "N")]
        (Option<u32> => u32 = req.qps.unwrap_or(1))
    record
        /// Number of QPs.
        (u32 = plan.qps)

    tx_depth: Plan {
        record_type: "integer, bandwidth tests",
        flag: Some("--tx-depth"),
        perftest: Some("-t"),
        range: Some((1, 1 << 16)),
        label: "TX depth",
    }
    request
        /// Operations in flight per QP [default: 128]
        #[arg(short = 't', long = "tx-depth", value_name = "N")]
        (Option<u32> => u32 = req.tx_depth.unwrap_or(DEFAULT_TX_DEPTH))
    record
        /// Operations kept posted per QP (`-t`), every verb.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<u32> = bw(plan).then_some(plan.tx_depth))

    rx_depth: Plan {
        record_type: "integer, SEND tests",
        flag: Some("--rx-depth"),
        perftest: Some("-r"),
        range: Some((1, 1 << 16)),
        label: "RX depth",
    }
    request
        /// Receives kept posted per QP (SEND tests) [default: 512]
        #[arg(short = 'r', long = "rx-depth", value_name = "N")]
        (Option<u32> => u32 = req.rx_depth.unwrap_or(DEFAULT_RX_DEPTH))
    record
        /// Receives kept posted per QP (`-r`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<u32> = (plan.test.verb == Verb::Send).then_some(plan.rx_depth))

    outs: Plan {
        record_type: "integer, READ and atomic tests",
        flag: Some("--outs"),
        perftest: Some("-o"),
        applies: Applies {
            to: |t, _| matches!(t.verb, Verb::Read | Verb::Atomic),
            why: "it caps outstanding READs and atomics (read-bw, read-lat, atomic-bw, atomic-lat)",
        },
        label: "Outstanding",
    }
    request
        /// Outstanding READs/atomics per QP [default: what both allow]
        ///
        /// READs/atomics a QP keeps outstanding at the responder (read and atomic tests; a
        /// ConnectX allows 16) [default: what both devices allow]
        #[arg(short = 'o', long = "outs", value_name = "N")]
        (Option<u32> => Option<u32> = req.outs)
    record
        /// *eff.*: READs/atomics a QP may have outstanding at the responder: the smaller of both
        /// devices' limits, or `-o`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<u32> = reads(plan).then_some(plan.outs.unwrap_or(0)))

    atomic: Plan {
        record_type: "string, atomic tests",
        flag: Some("--atomic-type"),
        perftest: Some("-A"),
        applies: Applies {
            to: |t, _| t.verb == Verb::Atomic,
            why: "it is the atomic tests' operation (atomic-bw, atomic-lat)",
        },
        label: "Atomic",
    }
    request
        /// Atomic op: FETCH_AND_ADD or CMP_AND_SWAP [default: FETCH_AND_ADD]
        ///
        /// Atomic operation of the atomic tests: FETCH_AND_ADD or CMP_AND_SWAP [default: FETCH_AND_ADD]
        #[arg(short = 'A', long = "atomic-type", value_name = "TYPE", value_parser = AtomicOp::parse)]
        (Option<AtomicOp> => AtomicOp = req.atomic.unwrap_or(AtomicOp::FetchAdd))
    record
        /// `"FETCH_AND_ADD"` or `"CMP_AND_SWAP"` (`-A`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<String> = (plan.test.verb == Verb::Atomic).then(|| plan.atomic.name().to_string()))

    cq_mod: Plan {
        record_type: "integer, bandwidth tests",
        flag: Some("--cq-mod"),
        perftest: Some("-Q"),
        label: "CQ moderation",
    }
    request
        /// A completion every N operations [default: -t/2 (64), at most 100]
        ///
        /// Request a completion every N operations [default: the lesser of 100 and half of -t
        /// (so 64 at the default -t of 128), and less when -l is large]
        #[arg(short = 'Q', long = "cq-mod", value_name = "N")]
        (Option<u32> => u32 = req.cq_mod.unwrap_or_else(|| default_cq_mod(tx_depth, req.post_list.unwrap_or(1))))
    record
        /// One signaled completion per this many operations (`-Q`; by default 100, at most half of
        /// `tx_depth`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<u32> = bw(plan).then_some(plan.cq_mod))

    post_list: Plan {
        record_type: "integer, bandwidth tests",
        flag: Some("--post-list"),
        perftest: Some("-l"),
        applies: Applies {
            to: |t, _| t.mode == Mode::Bw,
            why: "a latency test posts one request at a time",
        },
        label: "Post list",
    }
    request
        /// Work requests per doorbell [default: 1]
        #[arg(short = 'l', long = "post-list", value_name = "N")]
        (Option<u32> => u32 = req.post_list.unwrap_or(1))
    record
        /// Work requests per doorbell (`-l`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<u32> = bw(plan).then_some(plan.post_list))

    inline: Plan {
        record_type: "integer",
        flag: Some("--inline-size"),
        perftest: Some("-I"),
        applies: Applies {
            to: |t, _| t.verb != Verb::Read,
            why: "READ responses cannot be inline",
        },
        range: Some((0, 1 << 16)),
        label: "Inline bytes",
    }
    request
        /// Send messages up to BYTES inline [default: see --help]
        ///
        /// Send messages up to this many bytes inline [default: latency tests with host memory:
        /// perftest's (WRITE 220, SEND 236, UD SEND 188) capped by what the client's device allows;
        /// otherwise 0, off]
        #[arg(short = 'I', long = "inline-size", value_name = "BYTES", value_parser = parse_size_u32)]
        (Option<u32> => u32 = req.inline.unwrap_or(0))
    record
        /// Inline threshold in bytes (`-I`, 0 = off).
        (u32 = plan.inline)

    path_mtu: Plan {
        record_type: "integer",
        flag: Some("--mtu"),
        perftest: Some("-m"),
        label: "Path MTU",
    }
    request
        /// Path MTU: 256 .. 4096 [default: the ports' active MTU]
        ///
        /// Path MTU: 256, 512, 1024, 2048 or 4096 [default: the ports' active MTU]
        #[arg(short = 'm', long = "mtu", value_name = "BYTES")]
        (Option<u32> => Option<u32> = req.path_mtu)
    record
        /// *eff.*: the path MTU in bytes, the smallest of both ports' active MTUs and `-m` (absent
        /// in records before it was added).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<u32> = plan.path_mtu)

    qp_timeout: Plan {
        record_type: "integer, RC",
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
    }
    request
        /// RC ack timeout, 4.096 us * 2^N a try [default: 14, rxe 18 but READ]
        ///
        /// RC acknowledgement timeout: 4.096 us * 2^N a try (1..31) [default: 14, on a software
        /// device such as rxe 18 but for READs]
        #[arg(short = 'u', long = "qp-timeout", value_name = "N")]
        (Option<u8> => Option<u8> = req.qp_timeout)
    record
        /// *eff.*: this side's acknowledgement timeout exponent: a request is sent again after
        /// 4.096 us x 2^N without an acknowledgement, up to 7 times (`-u`; by default 14, 67 ms, as
        /// perftest, and 18, 1.07 s, on a software device such as rxe but for READs); absent for
        /// UC/UD and in older records.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<u8> = plan.qp_timeout)

    retry_count: Plan {
        record_type: "integer, RC",
        flag: Some("--retry-count"),
        perftest: Some("--retry_count"),
        applies: Applies {
            to: |_, c| c == Connection::Rc,
            why: "only RC sends a request again",
        },
        range: Some((0, 7)),
        label: "Retry count",
        // Changes no figure unless packets are lost, as the acknowledgement timeout.
        compare: Compared::Info,
    }
    request
        /// RC: sends of a request after -u's timeout, 0..7 [default: 7]
        ///
        /// RC: how many times an unacknowledged request is sent again, each after -u's
        /// timeout, before the QP fails with a retry-exceeded error: 0..7, as perftest's
        /// --retry_count (which sets it with -R only; rdmabench on every RC QP) [default: 7]
        #[arg(long = "retry-count", alias = "retry_count", value_name = "N")]
        (Option<u8> => u8 = req.retry_count.unwrap_or(DEFAULT_RETRY_COUNT))
    record
        /// How many times a request was to be sent again after its acknowledgement timeout
        /// before the QP failed (`--retry-count`; 7 by default, as perftest); absent for UC/UD
        /// and in older records.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<u8> = (plan.connection == Connection::Rc).then_some(plan.retry_count))

    pkey_index: Plan {
        record_type: "integer, absent for 0",
        flag: Some("--pkey-index"),
        perftest: Some("--pkey_index"),
        range: Some((0, u16::MAX as u64)),
        label: "P_Key index",
    }
    request
        /// The QPs' entry of the port's P_Key table [default: 0]
        ///
        /// The entry of the port's P_Key table the QPs use (their partition on InfiniBand),
        /// as perftest's --pkey_index; refused past the port's table [default: 0, the
        /// default partition's key]
        #[arg(long = "pkey-index", alias = "pkey_index", value_name = "N")]
        (Option<u16> => u16 = req.pkey_index.unwrap_or(0))
    record
        /// The entry of the port's P_Key table the QPs used (`--pkey-index`); absent for 0,
        /// the default partition's key, and in older records.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<u16> = (plan.pkey_index > 0).then_some(plan.pkey_index))

    tclass: Plan {
        record_type: "integer, with a GRH",
        flag: Some("--tclass"),
        perftest: Some("--tclass"),
        range: Some((0, 255)),
        label: "Traffic class",
    }
    request
        /// Traffic class (RoCE v2: the TOS byte), 0..255 or 0x68
        ///
        /// Traffic class of the GRH, 0..255 or hex (0x68): on RoCE v2 the IP TOS byte (DSCP = N >> 2,
        /// ECN = N & 3), so that a run lands in the fabric's lossless (PFC) class, e.g. 106 for
        /// DSCP 26; on InfiniBand it needs -x [default: 0]
        #[arg(long = "tclass", value_name = "N", value_parser = parse_class)]
        (Option<u8> => Option<u8> = req.tclass)
    record
        /// *eff.*: the GRH's traffic class the QPs sent, on RoCE v2 the IP TOS byte (`--tclass`,
        /// else 0); absent without a GRH (InfiniBand without `-x`) and in older records.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<u8> = plan.tclass)

    rdma_cm: Plan {
        record_type: "boolean",
        flag: Some("--rdma-cm"),
        perftest: Some("-R"),
        applies: Applies {
            to: |_, c| c == Connection::Rc,
            why: "the RDMA CM connects RC QPs here; use -c RC",
        },
        label: "RDMA CM",
    }
    request
        /// Connect the QPs through the RDMA CM, as perftest's -R
        ///
        /// Connect the QPs through the RDMA connection manager (librdmacm), as perftest's -R; the
        /// control channel still carries the plan (RC only)
        #[arg(short = 'R', long = "rdma-cm")]
        (bool => bool = req.rdma_cm)
    record
        /// The QPs were connected through the RDMA CM (`-R`); false when absent.
        #[serde(default)]
        (bool = plan.rdma_cm)

    srq: Plan {
        record_type: "boolean",
        flag: Some("--srq"),
        perftest: Some("--use-srq"),
        applies: Applies {
            to: |t, _| t.verb == Verb::Send,
            why: "a shared receive queue holds SEND receives (send-bw, send-lat)",
        },
        label: "Shared RQ",
    }
    request
        /// SEND tests: receive from one shared receive queue
        ///
        /// SEND tests: a receiving side's QPs take their receives from one shared receive queue of
        /// -r receives in all (perftest's --use-srq)
        #[arg(long = "srq", alias = "use-srq")]
        (bool => bool = req.srq)
    record
        /// A receiving side's QPs took their receives from one shared receive queue (`--srq`, SEND
        /// tests); false when absent.
        #[serde(default)]
        (bool = plan.srq)

    rate_limit: Plan {
        record_type: "number, paced runs",
        flag: Some("--rate-limit"),
        applies: Applies {
            to: |t, _| t.mode == Mode::Bw,
            why: "it paces a bandwidth test's posts; a latency test has one operation in flight",
        },
        label: "Paced to GB/s",
    }
    request
        /// Pace the posts to at most RATE: Gb/s, or 10Gb, 3GB
        ///
        /// Pace the posts in software to at most RATE (bandwidth tests; each sending side, all QPs
        /// together): a bare number is Gb/s, as perftest's --rate_limit; or 10Gb, 5Gbps, 3GB, 25GB/s
        #[arg(long = "rate-limit", value_name = "RATE", value_parser = parse_gbits_rate)]
        (Option<f64> => Option<f64> = req.rate_limit)
    record
        /// The run was paced: each sending side posted at most this many GB/s (`--rate-limit`);
        /// absent when it was not.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<f64> = plan.rate_limit)

    sl: Plan {
        record_type: "integer",
        flag: Some("--sl"),
        perftest: Some("-S"),
        range: Some((0, 15)),
        label: "Service level",
    }
    request
        /// Service level, 0..15 [default: 0]
        ///
        /// Service level, 0..15: on InfiniBand the virtual lane the subnet manager maps it to; on
        /// RoCE a ConnectX's 802.1p priority of VLAN-tagged frames (docs/running.md) [default: 0]
        #[arg(short = 'S', long = "sl", value_name = "N")]
        (Option<u8> => Option<u8> = req.sl)
    record
        /// The service level of the QPs' address vectors (`--sl`, else 0); 0 when absent.
        #[serde(default)]
        (u8 = plan.sl.unwrap_or(0))

    mr_per_qp: Plan {
        record_type: "boolean",
        flag: Some("--mr-per-qp"),
        perftest: Some("--mr_per_qp"),
        label: "MR per QP",
    }
    request
        /// Register each QP's part of the buffer as its own region
        ///
        /// Register each QP's part of the buffer as a memory region of its own (host memory),
        /// as perftest's --mr_per_qp: a QP's requests and its peer's name that region's keys
        /// (a shared receive queue takes the whole buffer's); unlike perftest, --validate may
        /// go with it
        #[arg(long = "mr-per-qp", alias = "mr_per_qp")]
        (bool => bool = req.mr_per_qp)
    record
        /// Each QP's part of the buffer was registered as a memory region of its own
        /// (`--mr-per-qp`); false when absent.
        #[serde(default)]
        (bool = plan.mr_per_qp)

    validate: Plan {
        record_type: "boolean",
        flag: Some("--validate"),
        label: "Validate",
    }
    request
        /// Check the payload that arrived after each size
        ///
        /// Check the payload that arrived after each size (the run fails on a wrong byte)
        #[arg(long)]
        (bool => bool = req.validate)
    record
        /// The payload was checked after each size (`--validate`); false when absent.
        #[serde(default)]
        (bool = plan.validate)

    relaxed_ordering: Side {
        record_type: "boolean",
        flag: Some("--disable-pcie-relaxed"),
        perftest: Some("--disable_pcie_relaxed"),
        label: "Relaxed order",
    }
    record
        /// This side's memory was registered with PCIe relaxed ordering
        /// (`IBV_ACCESS_RELAXED_ORDERING`, on by default as in perftest; off with
        /// `--disable-pcie-relaxed`, or when the provider refused it); false when absent (records
        /// from before it existed).
        #[serde(default)]
        (bool = false)

    hugepages: Side {
        record_type: "boolean",
        flag: Some("--use-hugepages"),
        perftest: Some("--use-hugepages"),
        label: "Huge pages",
    }
    record
        /// This side's host buffer was on huge pages (`--use-hugepages`); false when absent.
        #[serde(default)]
        (bool = false)

    odp: Side {
        record_type: "boolean",
        flag: Some("--odp"),
        perftest: Some("--odp"),
        label: "Demand paging",
    }
    record
        /// This side's buffer was registered for on-demand paging (`--odp`); false when absent.
        #[serde(default)]
        (bool = false)

    threads: Side {
        record_type: "integer",
        flag: Some("--threads"),
        applies: Applies {
            to: |t, _| t.mode == Mode::Bw,
            why: "a latency test measures one QP ping-pong in one thread",
        },
        label: "Threads",
    }
    record
        /// Measuring threads on this side's device (`--threads`), each with its own QPs and CQ;
        /// their figures are the record's `rails`, all together its `results`; 1 when absent.
        #[serde(default = "one")]
        (u32 = 1)

    clock: Side {
        record_type: "string, absent for bandwidth tests",
        flag: Some("--clock"),
        applies: Applies {
            to: |t, _| t.mode == Mode::Lat,
            why: "it times a latency test's round trips; a bandwidth test's window is timed \
                  by the monotonic clock",
        },
        label: "Clock",
        in_header: false,
    }
    record
        /// The clock that timed each round trip: `"tsc"` (the CPU's time-stamp counter, calibrated)
        /// or `"monotonic"` (`--clock`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<String> = None)

    clock_hz: Found {
        record_type: "number, absent for bandwidth tests",
        label: "Clock rate (Hz)",
        in_header: false,
        compare: Compared::Skip,
    }
    record
        /// That clock's ticks per second: the TSC's calibrated rate, or 1e9 for the monotonic
        /// clock.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<f64> = None)

    cpus: Side {
        record_type: "string, absent with `--no-pin`",
        flag: Some("--cpus"),
        label: "CPUs",
        in_header: false,
    }
    record
        /// The CPU this side's measuring thread was pinned to while it measured, e.g. `"3"`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<String> = None)

    numa_node: Found {
        record_type: "integer, absent when unknown",
        label: "NUMA node",
        in_header: false,
    }
    record
        /// The NIC's NUMA node from sysfs (absent for -1 and for virtual devices such as
        /// soft-RoCE).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<u32> = None)

    placement: Found {
        record_type: "string",
        label: "Placement",
        in_header: false,
        compare: Compared::Skip,
    }
    record
        /// Where the CPU in `cpus` was chosen from, as the header's `Measuring on` line says it:
        /// `"of the NIC's node 0 0-15"`, `"of --cpus 2-3"`, `"NIC's NUMA node unknown; one of the
        /// allowed CPUs 0-1"`, or `"not pinned (--no-pin)"`; `compare` ignores it (`cpus` and
        /// `numa_node` say what differs); absent in older records.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<String> = None)

    iters: Plan {
        record_type: "integer or null",
        flag: Some("--iters"),
        perftest: Some("-n"),
        range: Some((1, u32::MAX as u64)),
        label: "Iterations",
        in_header: false,
        compare: Compared::Info,
    }
    request
        /// Operations per QP and size [default: 5000, latency 1000]
        #[arg(
            short = 'n',
            long = "iters",
            value_name = "N",
            conflicts_with = "duration"
        )]
        (Option<u64> => u64 = req.iters.unwrap_or(if test.mode == Mode::Lat { DEFAULT_ITERS_LAT } else { DEFAULT_ITERS_BW }))
    record
        /// Operations per QP and size (`-n`), for iteration-count runs.
        (Option<u64> = plan.duration.is_none().then_some(plan.iters))

    latency_gap: Plan {
        record_type: "integer, latency tests with a gap",
        flag: Some("--latency-gap"),
        perftest: Some("--latency_gap"),
        applies: Applies {
            to: |t, _| t.mode == Mode::Lat,
            why: "it spaces a latency test's round trips; --rate-limit paces a bandwidth test",
        },
        range: Some((0, MAX_LATENCY_GAP_US)),
        label: "Gap (us)",
    }
    request
        /// Latency tests: wait USECS between round trips [default: 0]
        ///
        /// Latency tests: the initiator waits USECS microseconds after each round trip before
        /// posting the next (0 to 1000000), as perftest's --latency_gap; the wait is not
        /// counted in the latency (perftest's is) [default: 0, back to back]
        #[arg(long = "latency-gap", alias = "latency_gap", value_name = "USECS")]
        (Option<u32> => u32 = req.latency_gap.unwrap_or(0))
    record
        /// Microseconds the initiator waited after each round trip before posting the next
        /// (`--latency-gap`), not counted in the latencies; absent when it did not wait.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<u32> = (plan.latency_gap > 0).then_some(plan.latency_gap))

    warmup: Found {
        record_type: "integer, latency tests",
        label: "Warm-up",
        in_header: false,
        compare: Compared::Info,
    }
    record
        /// Round trips before each size's measured ones (16); absent for bandwidth tests and in
        /// older records.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<u64> = (!bw(plan)).then_some(LAT_WARMUP))

    duration: Plan {
        record_type: "number or null",
        flag: Some("--duration"),
        perftest: Some("-D"),
        label: "Duration (s)",
        in_header: false,
        compare: Compared::Info,
    }
    request
        /// Run each size for SECS (or 10s, 2m) instead of -n iterations
        ///
        /// Run each size for SECS (seconds, or 10s, 500ms, 2m) instead of -n iterations (a tenth,
        /// at most 2 s, is left out of the measured window at each end)
        #[arg(short = 'D', long = "duration", value_name = "SECS", value_parser = parse_secs)]
        (Option<f64> => Option<f64> = req.duration)
    record
        /// Seconds per size (`-D`), for duration runs.
        (Option<f64> = plan.duration)

    interval: Plan {
        record_type: "number, `-D` runs with intervals",
        flag: Some("--interval"),
        applies: Applies {
            to: |t, _| t.mode == Mode::Bw,
            why: "it cuts a bandwidth test's -D window; a latency test's figures are a histogram",
        },
        label: "Interval (s)",
        compare: Compared::Info,
    }
    request
        /// With -D: also the bandwidth of every SECS of the window
        ///
        /// With -D, also report the bandwidth of every SECS (seconds, or 500ms) of the measured
        /// window, its worst interval and their coefficient of variation (bandwidth tests; 0.1 s
        /// or more)
        #[arg(long = "interval", value_name = "SECS", requires = "duration", value_parser = parse_secs)]
        (Option<f64> => Option<f64> = req.interval)
    record
        /// Seconds per interval of the measured window (`--interval`): each size's `intervals`
        /// holds them; absent when not asked for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<f64> = plan.interval)

    bidirectional: Plan {
        record_type: "boolean",
        flag: Some("--bidirectional"),
        perftest: Some("-b"),
        applies: Applies {
            to: |t, _| t.mode == Mode::Bw,
            why: "a latency test is already a round trip",
        },
        label: "Bidirectional",
        in_header: false,
    }
    request
        /// Both sides send at once; each measures what it sends
        ///
        /// Both sides send at once; each measures what it sends (bandwidth tests)
        #[arg(short = 'b', long = "bidirectional")]
        (bool => bool = req.bidirectional)
    record
        /// Both directions at once (`-b`).
        (bool = plan.bidirectional)

    latency: Found {
        record_type: "string, absent for bandwidth tests",
        label: "Latency",
        in_header: false,
    }
    record
        /// `"one_way"` (RTT/2: WRITE, SEND) or `"round_trip"` (READ, atomics).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        (Option<String> = (!bw(plan)).then(|| latency_kind(plan.test).to_string()))

    repeat: Plan {
        record_type: "integer",
        flag: Some("--repeat"),
        range: Some((1, 1000)),
        label: "Repeat",
        in_header: false,
        compare: Compared::Info,
    }
    request
        /// Run the whole plan N times; the table shows medians
        ///
        /// Run the whole plan N times; the record keeps every repetition, the table their medians
        #[arg(long, value_name = "N")]
        (Option<u32> => u32 = req.repeat.unwrap_or(1))
    record
        /// How many times the plan ran (`--repeat N`); 1 when absent.
        #[serde(default = "one")]
        (u32 = plan.repeat)

    report_gbits: Plan {
        record_type: "boolean",
        flag: Some("--report-gbits"),
        perftest: Some("--report_gbits"),
        label: "Report Gb/s",
        in_header: false,
        // The table's unit only: the record's figures are GB/s and Gb/s both.
        compare: Compared::Skip,
    }
    request
        /// Report bandwidth in Gb/s instead of GB/s
        ///
        /// Report bandwidth in Gb/s instead of GB/s (the client's choice holds on both sides)
        #[arg(long, alias = "report_gbits")]
        (bool => bool = req.report_gbits)
    record
        /// The table showed bandwidth in Gb/s (`--report-gbits`); the record's figures are in both
        /// units either way, and `compare` ignores it; false when absent.
        #[serde(default)]
        (bool = plan.report_gbits)
}

/// A bandwidth test's plan.
fn bw(plan: &TestPlan) -> bool {
    plan.test.mode == Mode::Bw
}

/// A plan whose QPs keep READs or atomics outstanding at the responder.
fn reads(plan: &TestPlan) -> bool {
    matches!(plan.test.verb, Verb::Read | Verb::Atomic)
}

/// A latency test's figure: half the round trip where one direction is timed.
fn latency_kind(test: TestKind) -> &'static str {
    if test.one_way() {
        "one_way"
    } else {
        "round_trip"
    }
}

/// A completion at most every half queue, so that the queue never drains before the loop
/// sees room in it; and room for a whole post list beyond the unsignaled ones.
fn default_cq_mod(tx_depth: u32, post_list: u32) -> u32 {
    DEFAULT_CQ_MOD
        .min(tx_depth / 2)
        .min(tx_depth.saturating_sub(post_list) + 1)
        .max(1)
}

/// `--rate-limit`'s value in GB/s, a bare number in Gb/s (perftest's `--rate_limit`).
fn parse_gbits_rate(text: &str) -> Result<f64, String> {
    parse_rate(text, RateUnit::Gbits)
}

fn one() -> u32 {
    1
}

/// The record's `params` table of `results/schema.md`: each parameter's field, its JSON
/// type and where it is present, and its meaning (the record field's documentation, as the
/// record's JSON schema carries it), in the table's order.
pub fn params_table() -> String {
    let schema = serde_json::to_value(schemars::schema_for!(ParamsRecord)).unwrap_or_default();
    let descriptions = &schema["properties"];
    let mut out = String::from("| field | type | meaning |\n|---|---|---|\n");
    for p in PARAMS {
        let meaning = descriptions[p.key]["description"]
            .as_str()
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        out.push_str(&format!(
            "| `{}` | {} | {meaning} |\n",
            p.key, p.record_type
        ));
    }
    out
}

/// The header's parameter lines for `p`: label and value of each that applies.
pub fn header_fields(p: &ParamsRecord) -> Vec<(&'static str, String)> {
    PARAMS
        .iter()
        .filter(|param| param.in_header)
        .filter_map(|param| (param.value)(p).map(|v| (param.label, v)))
        .collect()
}
