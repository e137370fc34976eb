//! What one side's registered buffer is for a plan: how much memory it takes, and where
//! ([`Footprint`], the one computation that sizes the engine's allocation and that a server
//! checks against `--max-mem` before allocating anything), and what the peer may do with it
//! ([`remote_access`]: only what the test needs); and, with `--use-hugepages`, the host
//! buffer on huge pages ([`host_buffer`]).

use accel::StagingConfig;
use anyhow::{anyhow, Context, Result};
use verbs::{Access, HostBuffer, OdpCaps};

use super::{recv_len, transport};
use crate::memory::{slot_len, MemMode};
use crate::plan::{Mode, Role, TestPlan, Verb};

/// The memory one side's buffers take for a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// Bytes per QP where `--mem` says (a send and a receive half; a staged side's halves
    /// hold a whole bounce buffer's batch).
    pub slot: u64,
    /// What the peer's slot must hold: one message in each half.
    pub peer_slot: u64,
    /// QPs.
    pub qps: u32,
    /// `--mem cuda-staged`: the pinned host bounce buffers.
    pub(crate) bounce: Option<Bounce>,
    /// The payload lives in GPU memory.
    pub on_gpu: bool,
    /// Bytes of the work and completion queues, in host memory: what the device's driver
    /// allocates for the plan's depths ([`queue_bytes`]).
    pub queues: u64,
}

/// Bytes a send work request takes in its queue, at most (a ConnectX WQE with inline data
/// and its segments spans up to four 64-byte basic blocks).
const SEND_WQE_BYTES: u64 = 256;
/// Bytes a receive work request takes in its queue (a scatter entry or two).
const RECV_WQE_BYTES: u64 = 64;
/// Bytes a completion queue entry takes (a ConnectX CQE).
const CQE_BYTES: u64 = 64;

/// Bytes of the queues of `plan`: per QP, its send and receive queues, and the completion
/// queue's entries for both.
pub(crate) fn queue_bytes(plan: &TestPlan) -> u64 {
    let (tx, rx) = (u64::from(plan.tx_depth), u64::from(plan.rx_depth));
    let per_qp = tx * SEND_WQE_BYTES + rx * RECV_WQE_BYTES + (tx + rx) * CQE_BYTES;
    per_qp.saturating_mul(u64::from(plan.qps))
}

/// A staged side's bounce buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounce {
    /// Bytes of one bounce buffer.
    pub buffer_len: usize,
    /// Bytes of pinned memory per QP: its bounce buffers, at least a slot.
    pub stride: u64,
}

impl Footprint {
    /// The buffers of `plan` on a side whose memory is `mem` (staged with `staging`).
    pub fn new(plan: &TestPlan, mem: &MemMode, staging: accel::StagingConfig) -> Result<Self> {
        let half = slot_len(recv_len(transport(plan.connection), plan.max_size()));
        let peer_slot = 2 * half;
        let (slot, bounce) = if mem.is_staged() {
            let buffer_len = bounce_len(staging, plan.test.verb, plan.max_size())?;
            let slot = 2 * half.max(slot_len(buffer_len as u64));
            let stride =
                slot_len((buffer_len as u64).saturating_mul(staging.depth as u64)).max(slot);
            (slot, Some(Bounce { buffer_len, stride }))
        } else {
            (peer_slot, None)
        };
        Ok(Footprint {
            slot,
            peer_slot,
            qps: plan.qps,
            bounce,
            on_gpu: !matches!(mem, MemMode::Host),
            queues: queue_bytes(plan),
        })
    }

    /// Bytes of the payload memory: a slot per QP.
    pub(crate) fn payload_bytes(&self) -> u64 {
        self.slot.saturating_mul(u64::from(self.qps))
    }

    /// Bytes of pinned bounce buffers (staged), else 0.
    pub(crate) fn bounce_bytes(&self) -> u64 {
        self.bounce
            .map_or(0, |b| b.stride.saturating_mul(u64::from(self.qps)))
    }

    /// Bytes of host memory the buffers pin, and the queues.
    pub fn host_bytes(&self) -> u64 {
        let payload = if self.on_gpu { 0 } else { self.payload_bytes() };
        payload
            .saturating_add(self.bounce_bytes())
            .saturating_add(self.queues)
    }

    /// Bytes of GPU memory the buffers take.
    pub fn gpu_bytes(&self) -> u64 {
        if self.on_gpu {
            self.payload_bytes()
        } else {
            0
        }
    }
}

/// What the peer may do with this side's buffer: WRITE into it in WRITE tests, READ it in READ
/// tests, atomics on it in atomic tests, nothing in SEND tests; and only where the peer's
/// operations land: on the server, on both sides with `-b`, and on both in write-lat's
/// ping-pong. (A staged write-bw server is written into with immediate data, a staged read-bw
/// server is read; their notices and credits are SENDs.)
pub(crate) fn remote_access(plan: &TestPlan, role: Role) -> Access {
    let verb = plan.test.verb;
    let target = role == Role::Server
        || plan.bidirectional
        || (plan.test.mode == Mode::Lat && verb == Verb::Write);
    Access {
        remote_write: target && verb == Verb::Write,
        remote_read: target && verb == Verb::Read,
        remote_atomic: target && verb == Verb::Atomic,
        relaxed_ordering: false,
        on_demand: false,
    }
}

/// Whether this side registers with PCIe relaxed ordering: as asked (`--disable-pcie-relaxed`),
/// but never the bounce buffers of a staged WRITE latency test. Its arrival is seen by polling
/// the last byte of the message; under relaxed ordering that byte may land before the others,
/// and the copy into the GPU (and `--validate`) would take stale ones.
pub(crate) fn relaxed_ordering(asked: bool, plan: &TestPlan, mem: &MemMode) -> bool {
    let polls_a_byte = plan.test.mode == Mode::Lat && plan.test.verb == Verb::Write;
    asked && !(mem.is_staged() && polls_a_byte)
}

/// Why `--odp` cannot run `plan` on `device` (whose on-demand paging is `caps`): the device
/// has none, or not for every operation the test needs over its transport.
pub(crate) fn odp_refusal(device: &str, caps: OdpCaps, plan: &TestPlan) -> Option<String> {
    let transport = transport(plan.connection);
    let offered = caps.over(transport);
    if caps == OdpCaps::default() {
        return Some(format!(
            "--odp: {device} offers no on-demand paging (ibv_query_device_ex has no \
             IBV_ODP_SUPPORT; soft-RoCE in Linux 6.1 has none): leave --odp out"
        ));
    }
    let needs = match plan.test.verb {
        Verb::Write => OdpCaps::WRITE,
        Verb::Read => OdpCaps::READ,
        Verb::Send => OdpCaps::SEND | OdpCaps::RECV,
        Verb::Atomic => OdpCaps::ATOMIC,
    };
    let missing = needs & !offered;
    (missing != 0).then(|| {
        let has = match OdpCaps::names(offered) {
            n if n.is_empty() => "nothing".to_string(),
            n => n,
        };
        format!(
            "--odp: {device} pages {has} on demand over {}, and {} needs {} too: leave --odp \
             out",
            plan.connection.name(),
            plan.test,
            OdpCaps::names(missing)
        )
    })
}

/// The kernel's pool of huge pages, as /proc/meminfo says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HugePool {
    /// Bytes per huge page (`Hugepagesize`).
    pub page: usize,
    /// Pages reserved (`HugePages_Total`, what `vm.nr_hugepages` set).
    pub total: u64,
    /// Pages free (`HugePages_Free`).
    pub free: u64,
}

impl HugePool {
    /// The pool as `meminfo` (the text of /proc/meminfo) describes it; `None` when it does not.
    pub(crate) fn parse(meminfo: &str) -> Option<HugePool> {
        let field = |name: &str| {
            meminfo
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        };
        Some(HugePool {
            page: usize::try_from(field("Hugepagesize")?.checked_mul(1024)?).ok()?,
            total: field("HugePages_Total")?,
            free: field("HugePages_Free")?,
        })
    }

    /// This machine's pool.
    pub(crate) fn current() -> Option<HugePool> {
        HugePool::parse(&std::fs::read_to_string("/proc/meminfo").ok()?)
    }
}

/// `len` bytes of host memory for the registered buffer: on huge pages with `huge`
/// (`--use-hugepages`), where too few free ones fail naming how many are needed and how to
/// reserve them.
pub(crate) fn host_buffer(len: usize, huge: bool) -> Result<HostBuffer> {
    if !huge {
        return Ok(HostBuffer::new(len)?);
    }
    let pool = HugePool::current()
        .ok_or_else(|| anyhow!("--use-hugepages: /proc/meminfo says nothing of huge pages"))?;
    HostBuffer::huge(len, pool.page).map_err(|e| anyhow!("{}", huge_refusal(len, pool, &e)))
}

/// Why `len` bytes did not fit in `pool`, and what to do.
fn huge_refusal(len: usize, pool: HugePool, error: &verbs::VerbsError) -> String {
    let need = len.div_ceil(pool.page.max(1));
    let mib = pool.page >> 20;
    format!(
        "--use-hugepages: {len} bytes need {need} huge pages of {mib} MiB, and {} of the {} \
         reserved are free ({error}); reserve more as root with `sysctl -w vm.nr_hugepages=N` \
         (N at least {}), or leave --use-hugepages out",
        pool.free,
        pool.total,
        pool.total.saturating_sub(pool.free) + need as u64
    )
}

/// Bytes of one bounce buffer for `verb` up to `max_size`: the chunk, or for SEND (never
/// split) the largest message rounded up to whole pages when that is larger.
pub(super) fn bounce_len(config: StagingConfig, verb: Verb, max_size: u64) -> Result<usize> {
    let whole = usize::try_from(slot_len(max_size)).context("message size too large")?;
    Ok(if verb == Verb::Send {
        config.chunk.max(whole)
    } else {
        config.chunk
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odp_is_refused_where_the_device_lacks_it_naming_what_is_missing() {
        let plan = |test: &str| {
            crate::plan::PlanRequest::default()
                .resolve(crate::plan::TestKind::parse(test).unwrap())
                .unwrap()
        };
        let none = odp_refusal("rxe0", OdpCaps::default(), &plan("write-bw")).unwrap();
        assert!(none.contains("rxe0 offers no on-demand paging"), "{none}");
        let caps = OdpCaps {
            rc: OdpCaps::SEND | OdpCaps::RECV | OdpCaps::WRITE,
            ..OdpCaps::default()
        };
        assert_eq!(odp_refusal("mlx5_0", caps, &plan("write-bw")), None);
        assert_eq!(odp_refusal("mlx5_0", caps, &plan("send-lat")), None);
        let read = odp_refusal("mlx5_0", caps, &plan("read-bw")).unwrap();
        assert!(
            read.contains(
                "mlx5_0 pages SEND, RECV, WRITE on demand over RC, and read-bw needs READ"
            ),
            "{read}"
        );
    }

    #[test]
    fn staged_write_latency_bounce_buffers_never_take_relaxed_ordering() {
        let plan = |test: &str| {
            crate::plan::PlanRequest::default()
                .resolve(crate::plan::TestKind::parse(test).unwrap())
                .unwrap()
        };
        let mem = |m: &str| MemMode::parse(m).unwrap();
        let staged = mem("cuda-staged");
        assert!(!relaxed_ordering(true, &plan("write-lat"), &staged));
        assert!(!relaxed_ordering(
            true,
            &plan("write-lat"),
            &mem("rocm-staged")
        ));
        // What polls no byte, or is no bounce buffer, keeps what was asked.
        assert!(relaxed_ordering(true, &plan("send-lat"), &staged));
        assert!(relaxed_ordering(true, &plan("write-bw"), &staged));
        assert!(relaxed_ordering(true, &plan("write-lat"), &mem("cuda")));
        assert!(!relaxed_ordering(false, &plan("write-bw"), &staged));
    }

    #[test]
    fn the_huge_page_pool_is_read_from_meminfo() {
        let meminfo = "MemTotal:       24576000 kB\nHugePages_Total:      64\n\
                       HugePages_Free:       60\nHugePages_Rsvd:        0\n\
                       Hugepagesize:       2048 kB\n";
        let pool = HugePool::parse(meminfo).unwrap();
        assert_eq!(
            pool,
            HugePool {
                page: 2 << 20,
                total: 64,
                free: 60
            }
        );
        assert_eq!(HugePool::parse("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn too_few_huge_pages_are_refused_saying_how_to_reserve_them() {
        let pool = HugePool {
            page: 2 << 20,
            total: 0,
            free: 0,
        };
        let error = verbs::VerbsError::InvalidRequest("ENOMEM".into());
        let text = huge_refusal(5 << 20, pool, &error);
        assert!(
            text.contains("5242880 bytes need 3 huge pages of 2 MiB"),
            "{text}"
        );
        assert!(text.contains("0 of the 0 reserved are free"), "{text}");
        assert!(
            text.contains("sysctl -w vm.nr_hugepages=N` (N at least 3)"),
            "{text}"
        );
    }
    use crate::plan::{Connection, PlanRequest, TestKind};

    fn plan(verb: Verb, mode: Mode, request: PlanRequest) -> TestPlan {
        request.resolve(TestKind::new(verb, mode)).unwrap()
    }

    fn rights(a: Access) -> (bool, bool, bool) {
        (a.remote_write, a.remote_read, a.remote_atomic)
    }

    #[test]
    fn each_test_grants_the_peer_only_what_it_does() {
        let none = (false, false, false);
        let bw = |verb| plan(verb, Mode::Bw, PlanRequest::default());
        let bidir = |verb| {
            let request = PlanRequest {
                bidirectional: true,
                ..Default::default()
            };
            plan(verb, Mode::Bw, request)
        };
        let lat = |verb| plan(verb, Mode::Lat, PlanRequest::default());
        let cases = [
            (bw(Verb::Write), (true, false, false), none),
            (bw(Verb::Read), (false, true, false), none),
            (bw(Verb::Send), none, none),
            (bw(Verb::Atomic), (false, false, true), none),
            (
                bidir(Verb::Write),
                (true, false, false),
                (true, false, false),
            ),
            (
                bidir(Verb::Read),
                (false, true, false),
                (false, true, false),
            ),
            (bidir(Verb::Send), none, none),
            (
                bidir(Verb::Atomic),
                (false, false, true),
                (false, false, true),
            ),
            (lat(Verb::Write), (true, false, false), (true, false, false)),
            (lat(Verb::Read), (false, true, false), none),
            (lat(Verb::Send), none, none),
            (lat(Verb::Atomic), (false, false, true), none),
        ];
        for (p, server, client) in cases {
            let what = format!("{} -b {}", p.test, p.bidirectional);
            assert_eq!(
                rights(remote_access(&p, Role::Server)),
                server,
                "server of {what}"
            );
            assert_eq!(
                rights(remote_access(&p, Role::Client)),
                client,
                "client of {what}"
            );
        }
    }

    #[test]
    fn the_footprint_is_a_slot_per_qp_where_the_memory_lives() {
        let request = PlanRequest {
            size: Some(1 << 20),
            qps: Some(4),
            ..Default::default()
        };
        let p = plan(Verb::Write, Mode::Bw, request);
        let host = Footprint::new(&p, &MemMode::Host, accel::StagingConfig::default()).unwrap();
        assert_eq!((host.slot, host.peer_slot), (2 << 20, 2 << 20));
        // The queues: per QP 128 send WQEs, 512 receive WQEs and a CQE for each.
        let queues = 4 * (128 * 256 + 512 * 64 + 640 * 64);
        assert_eq!(host.queues, queues);
        assert_eq!(
            (host.host_bytes(), host.gpu_bytes()),
            ((8 << 20) + queues, 0)
        );
        let gpu = MemMode::parse("cuda:0").unwrap();
        let on_gpu = Footprint::new(&p, &gpu, accel::StagingConfig::default()).unwrap();
        assert_eq!((on_gpu.host_bytes(), on_gpu.gpu_bytes()), (queues, 8 << 20));
    }

    #[test]
    fn a_staged_footprint_adds_the_pinned_bounce_buffers() {
        let request = PlanRequest {
            size: Some(64 << 10),
            qps: Some(2),
            ..Default::default()
        };
        let p = plan(Verb::Write, Mode::Bw, request);
        let staged = MemMode::parse("cuda-staged").unwrap();
        let cfg = accel::StagingConfig::new(1 << 20, 4).unwrap();
        let f = Footprint::new(&p, &staged, cfg).unwrap();
        // The GPU halves hold a bounce buffer's batch: 1 MiB each.
        assert_eq!(f.slot, 2 << 20);
        assert_eq!(f.peer_slot, 128 << 10);
        assert_eq!(
            f.bounce,
            Some(Bounce {
                buffer_len: 1 << 20,
                stride: 4 << 20
            })
        );
        assert_eq!(
            (f.gpu_bytes(), f.host_bytes()),
            (4 << 20, (8 << 20) + f.queues)
        );
    }

    #[test]
    fn ud_receives_make_room_for_the_grh() {
        let request = PlanRequest {
            size: Some(4096),
            connection: Some(Connection::Ud),
            ..Default::default()
        };
        let p = plan(Verb::Send, Mode::Bw, request);
        let f = Footprint::new(&p, &MemMode::Host, accel::StagingConfig::default()).unwrap();
        assert_eq!(f.slot, 2 * 8192);
    }
}
