//! What a device or a memory mode refuses of a plan, checked before anything is allocated:
//! the device's limits (QPs, depths, outstanding READs, a UD message within the MTU), the
//! memory mode's rules, a P_Key index past the port's table, and a traffic class without a
//! GRH. Each refusal names the value and
//! what would be valid.

use verbs::{Device, PortInfo};

use super::{staged, SideConfig};
use crate::memory::{GpuPath, MemMode};
use crate::plan::{Connection, Mode, PlanError, Role, TestPlan, Verb};

/// Checks the plan against what this device and port can do, before anything is created.
pub(super) fn check_device_limits(
    device: &Device,
    port: &PortInfo,
    plan: &TestPlan,
    slot: u64,
) -> Result<(), PlanError> {
    let f = device.facts();
    let depth = plan.tx_depth.max(plan.rx_depth);
    if depth > f.max_qp_wr {
        return Err(PlanError::Device(format!(
            "--tx-depth {} / --rx-depth {} exceed {}'s limit of {} work requests per queue: give \
             both {} or less",
            plan.tx_depth, plan.rx_depth, f.name, f.max_qp_wr, f.max_qp_wr
        )));
    }
    let cqe = u64::from(plan.qps) * u64::from(plan.tx_depth + plan.rx_depth);
    if cqe > u64::from(f.max_cqe) {
        return Err(PlanError::Device(format!(
            "--qps {} x (--tx-depth {} + --rx-depth {}) needs a CQ of {cqe} entries; {} allows {}: \
             lower one of them",
            plan.qps,
            plan.tx_depth,
            plan.rx_depth,
            f.name,
            f.max_cqe
        )));
    }
    let total = slot * u64::from(plan.qps);
    if f.max_mr_size > 0 && total > f.max_mr_size {
        return Err(PlanError::Device(format!(
            "{} QPs x {slot} bytes = {total} bytes exceeds {}'s largest memory region ({} bytes)",
            plan.qps, f.name, f.max_mr_size
        )));
    }
    if plan.connection == Connection::Ud {
        let mtu = plan
            .path_mtu
            .unwrap_or(port.active_mtu)
            .min(port.active_mtu);
        let whose = if mtu < port.active_mtu {
            format!("-m {mtu}")
        } else {
            format!("{}'s port {}", f.name, port.port)
        };
        check_ud_size(plan, mtu, &whose)?;
    }
    if matches!(plan.test.verb, Verb::Read | Verb::Atomic) && f.max_qp_rd_atom == 0 {
        return Err(PlanError::Device(format!(
            "{} does not support RDMA READ or atomics (max_qp_rd_atom is 0)",
            f.name
        )));
    }
    check_pkey_index(device, port.port, plan)?;
    check_outs(plan, f)
}

/// `--pkey-index` past the port's P_Key table, naming how many entries it has.
fn check_pkey_index(device: &Device, port: u8, plan: &TestPlan) -> Result<(), PlanError> {
    if plan.pkey_index == 0 {
        return Ok(());
    }
    let name = device.name();
    let len = device.pkey_table_len(port).map_err(|e| {
        PlanError::Device(format!(
            "--pkey-index {}: cannot read the P_Key table of {name} port {port}: {e}",
            plan.pkey_index
        ))
    })?;
    if plan.pkey_index < len {
        return Ok(());
    }
    let entries = if len == 1 { "entry" } else { "entries" };
    Err(PlanError::Device(format!(
        "--pkey-index {} is out of range: the P_Key table of {name} port {port} has {len} \
         {entries} (valid: 0 to {}); leave it out for the default partition's key",
        plan.pkey_index,
        len.saturating_sub(1)
    )))
}

/// `-o` above what the device lets a QP keep outstanding, naming the device's limit.
pub(super) fn check_outs(plan: &TestPlan, f: &verbs::DeviceFacts) -> Result<(), PlanError> {
    let most = f.max_qp_init_rd_atom.min(f.max_qp_rd_atom);
    match plan.outs {
        Some(o) if o > most => Err(PlanError::Device(format!(
            "--outs {o} exceeds {}'s limit of {most} outstanding READs/atomics per QP: give \
             --outs 1 to {most}, or leave it out",
            f.name
        ))),
        _ => Ok(()),
    }
}

/// UD carries one packet per message: every size of the plan must fit the path MTU that
/// `whose` (a port, or the peer's) allows.
pub(super) fn check_ud_size(plan: &TestPlan, mtu: u32, whose: &str) -> Result<(), PlanError> {
    let largest = plan.max_size();
    if largest <= u64::from(mtu) {
        return Ok(());
    }
    let asked = if plan.sizes.len() > 1 {
        format!("the sweep's {largest}-byte messages")
    } else {
        format!("-s {largest}")
    };
    Err(PlanError::Device(format!(
        "-c UD sends one packet per message: {asked} exceeds the path MTU of {mtu} bytes \
         ({whose}); give -s {mtu} or less, or -c RC"
    )))
}

/// What a memory mode cannot do with this plan: inline data or write-lat's CPU polling on GPU
/// memory, and what the staged path refuses (`staged::refusal`). Pure: the command line
/// checks it before anything loads the CUDA driver or opens a device (`TestArgs::
/// check_memory`), and `prepare` again on the plan this side runs (a server's is the
/// client's). `flag` is the option that gave `mem` (`--mem`, or `--peer-mem`).
pub(crate) fn check_memory_mode(
    flag: &str,
    mem: &MemMode,
    plan: &TestPlan,
    role: Role,
) -> Result<(), PlanError> {
    // The NIC reaches the GPU's memory itself (dma-buf or peer memory): the CPU cannot.
    let direct = mem.gdr();
    let staged = mem.is_staged();
    if direct && plan.inline > 0 {
        return Err(PlanError::Value(format!(
            "{flag} {}: --inline-size {}: inline data is copied from the buffer by the CPU, \
             which cannot read GPU memory; drop -I (the NIC reads GPU memory itself), or use \
             --mem {} (which posts from host bounce buffers)",
            mem.name(),
            plan.inline,
            mem.with_path(GpuPath::Staged)
        )));
    }
    if staged && plan.srq {
        return Err(PlanError::Value(format!(
            "{flag} {}: --srq: the staged pipeline posts its receives into its own bounce \
             buffers; leave one of them out",
            mem.name()
        )));
    }
    if let (true, Some(r)) = (staged, plan.rate_limit) {
        return Err(PlanError::Value(format!(
            "{flag} {}: --rate-limit {r} paces the host loop's posts; the staged pipeline \
             posts as its bounce buffers fill: leave one of them out",
            mem.name()
        )));
    }
    if plan.mr_per_qp && mem.gpu_mem().is_some() {
        return Err(PlanError::Value(format!(
            "{flag} {}: --mr-per-qp registers each QP's part of a host buffer on its own; leave \
             one of them out",
            mem.name()
        )));
    }
    if let Some(why) = staged.then(|| staged::refusal(plan, role)).flatten() {
        return Err(PlanError::Value(format!("{flag} {}: {why}", mem.name())));
    }
    let lat_write = plan.test.mode == Mode::Lat && plan.test.verb == Verb::Write;
    if direct && lat_write {
        return Err(PlanError::Value(format!(
            "{flag} {}: write-lat polls the last byte with the CPU, which cannot read GPU memory; \
             use send-lat, --mem {} (it polls the bounce buffer), or --mem host",
            mem.name(),
            mem.with_path(GpuPath::Staged)
        )));
    }
    Ok(())
}

/// The memory rules of a run whose two sides are both in this invocation (`--loopback`):
/// each side's mode (`client_flag` names the option that gave the client's), and a staged
/// server's need of a staged client with the same bounce buffers (`staged::check_peer`).
pub(crate) fn check_loopback_memory(
    plan: &TestPlan,
    server: &SideConfig,
    client: &SideConfig,
    client_flag: &str,
) -> Result<(), PlanError> {
    check_memory_mode("--mem", &server.mem, plan, Role::Server)?;
    check_memory_mode(client_flag, &client.mem, plan, Role::Client)?;
    let layout = |side: &SideConfig| staged::planned_layout(plan, &side.mem, side.staging);
    staged::check_peer(plan, Role::Server, layout(server), layout(client))
}

/// `--tclass` is a field of the GRH: refused, before anything is allocated, where the QPs
/// send none.
pub(super) fn check_tclass(plan: &TestPlan, grh: bool) -> Result<(), PlanError> {
    match (plan.tclass, grh) {
        (Some(tc), false) => Err(PlanError::Device(format!(
            "--tclass {tc} is a field of the GRH, which this InfiniBand port sends only with \
             -x: give -x GID_INDEX too, or leave --tclass out"
        ))),
        _ => Ok(()),
    }
}
