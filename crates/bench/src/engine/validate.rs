//! `--validate`: before each size every side zeroes its receive halves and writes the pattern
//! into its send halves; afterwards the side the data went to checks it. With GPU memory both
//! happen on the GPU's side of copies, so a run that moved the wrong bytes fails there too. An atomic target
//! checks its counters instead: a fetch-and-add of 1 or a compare-and-swap chain leaves the
//! number of operations the peer did on that QP (the counter is the first word of the
//! receive half; an atomic's fetched value lands in the initiator's send half, so with `-b`
//! neither side's fetches overwrite its own counter).

use verbs::{Transport, UD_GRH_BYTES};

use super::{staged, Connected};
use crate::memory::{check_pattern, fill_pattern};
use crate::plan::{Mode, Role, TestPlan, Verb};

/// Whether this side received data in `plan` and so checks it.
pub(crate) fn checks_here(plan: &TestPlan, role: Role) -> bool {
    let lat = plan.test.mode == Mode::Lat;
    let server = role == Role::Server;
    match plan.test.verb {
        Verb::Atomic => server || plan.bidirectional,
        Verb::Write | Verb::Send => server || plan.bidirectional || lat,
        Verb::Read => !server || plan.bidirectional,
    }
}

/// Zeroes every receive half and fills every send half with the pattern for `size` (through
/// copies when the buffer is GPU memory; for a staged side, message after message over the
/// span a bounce buffer's batch is copied from).
pub(crate) fn prepare_buffers(
    side: &mut Connected,
    plan: &TestPlan,
    size: u64,
) -> anyhow::Result<()> {
    let half = side.half();
    let span = staged::layout_for(side, plan, size)?.map_or(size, |l| l.span());
    if side.gpu.is_none() {
        for q in 0..side.qps.len() {
            let recv = side.recv_offset(q);
            side.bytes_mut(recv, half)?.fill(0);
            let send = side.send_offset(q);
            fill_pattern(side.bytes_mut(send, size)?, q as u32, size);
        }
        return Ok(());
    }
    let zeros = vec![0u8; half as usize];
    let mut pattern = vec![0u8; span as usize];
    for q in 0..side.qps.len() {
        side.write(side.recv_offset(q), &zeros)?;
        for message in pattern.chunks_mut(size as usize) {
            fill_pattern(message, q as u32, size);
        }
        side.write(side.send_offset(q), &pattern)?;
    }
    Ok(())
}

/// Checks what landed on this side for `size`; `peer_ops_per_qp` is how many operations the
/// peer completed on each QP (for atomics). Ok carries what was checked.
pub(crate) fn check_received(
    side: &Connected,
    plan: &TestPlan,
    size: u64,
    role: Role,
    peer_ops_per_qp: &[u64],
) -> Result<String, String> {
    if !plan.validate || !checks_here(plan, role) {
        return Ok("not checked on this side".to_string());
    }
    let qps = side.qps.len();
    if plan.test.verb == Verb::Atomic {
        for q in 0..qps {
            let bytes = side
                .read(side.recv_offset(q), 8)
                .map_err(|e| e.to_string())?;
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes);
            let value = u64::from_le_bytes(word);
            let want = peer_ops_per_qp.get(q).copied().unwrap_or(0);
            if value != want {
                return Err(format!(
                    "QP {q}: the atomic target holds {value}, expected {want} operations"
                ));
            }
        }
        return Ok(format!("{qps} atomic counters match the operations done"));
    }
    // WRITE latency overwrites the last byte with a round-trip tag.
    let len = if plan.test.mode == Mode::Lat && plan.test.verb == Verb::Write {
        size - 1
    } else {
        size
    };
    let skip = if side.transport == Transport::Ud {
        u64::from(UD_GRH_BYTES)
    } else {
        0
    };
    // A staged sink copies a batch of messages back to back into GPU memory: check them all.
    let span = staged::layout_for(side, plan, size)
        .map_err(|e| e.to_string())?
        .map_or(len, |l| l.span());
    for q in 0..qps {
        let bytes = side
            .read(side.recv_offset(q) + skip, span)
            .map_err(|e| e.to_string())?;
        for (i, message) in bytes.chunks(size as usize).enumerate() {
            check_pattern(&message[..message.len().min(len as usize)], q as u32, size).map_err(
                |e| {
                    if span > len {
                        format!("message {i} of a staged batch: {e}")
                    } else {
                        e
                    }
                },
            )?;
        }
    }
    if span > len {
        return Ok(format!(
            "{qps} QPs x {} messages of {len} bytes carry the pattern",
            span / size
        ));
    }
    Ok(format!("{qps} QPs x {len} bytes carry the pattern"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PlanRequest, TestKind};

    fn plan(verb: Verb, mode: Mode, bidirectional: bool) -> TestPlan {
        PlanRequest {
            bidirectional,
            validate: true,
            ..PlanRequest::default()
        }
        .resolve(TestKind::new(verb, mode))
        .unwrap()
    }

    #[test]
    fn the_side_the_data_went_to_checks_it() {
        // (verb, mode, -b) -> (server checks, client checks)
        for (verb, mode, b, server, client) in [
            (Verb::Write, Mode::Bw, false, true, false),
            (Verb::Send, Mode::Bw, false, true, false),
            (Verb::Read, Mode::Bw, false, false, true),
            (Verb::Atomic, Mode::Bw, false, true, false),
            (Verb::Atomic, Mode::Bw, true, true, true),
            (Verb::Write, Mode::Bw, true, true, true),
            (Verb::Read, Mode::Bw, true, true, true),
            (Verb::Write, Mode::Lat, false, true, true),
            (Verb::Send, Mode::Lat, false, true, true),
            (Verb::Read, Mode::Lat, false, false, true),
            (Verb::Atomic, Mode::Lat, false, true, false),
        ] {
            let p = plan(verb, mode, b);
            assert_eq!(
                checks_here(&p, Role::Server),
                server,
                "{verb:?} {mode:?} -b {b}: server"
            );
            assert_eq!(
                checks_here(&p, Role::Client),
                client,
                "{verb:?} {mode:?} -b {b}: client"
            );
        }
    }
}
