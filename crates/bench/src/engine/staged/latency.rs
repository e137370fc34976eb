//! Latency tests, staged: a ping-pong moves one message at a time, through the pinned
//! region laid out like host memory (QP 0's slot), copied out of the GPU before it is posted
//! and into the GPU after it arrived, inside the timed round trip.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::engine::lat::SPINS_PER_CHECK;
use crate::engine::Connected;

/// Latency tests, staged: copies `len` bytes of the GPU's send half to the bounce buffer the
/// message is posted from (the ping-pong uses the slot layout in pinned memory, QP 0), and
/// waits until it is there.
pub(crate) fn copy_out(side: &Connected, len: u64, stall: Duration) -> Result<()> {
    copy_and_wait(side, len, stall, true)
}

/// Latency tests, staged: copies the `len` bytes that landed in the bounce buffer to the GPU's
/// receive half, and waits until they are there.
pub(crate) fn copy_in(side: &Connected, len: u64, stall: Duration) -> Result<()> {
    copy_and_wait(side, len, stall, false)
}

fn copy_and_wait(side: &Connected, len: u64, stall: Duration, out: bool) -> Result<()> {
    let (Some(s), Some(g)) = (&side.staging, &side.gpu) else {
        return Ok(());
    };
    let len = len as usize;
    // SAFETY: a ping-pong has one message in flight: the NIC does not touch this range until
    // the copy is done (we wait for it below), and both buffers live in `side`.
    unsafe {
        if out {
            let at = side.send_offset(0) as usize;
            s.copies
                .device_to_host(&s.pinned, at, g.buf.as_ref(), at, len)?;
        } else {
            let at = side.recv_offset(0) as usize;
            s.copies
                .host_to_device(g.buf.as_ref(), at, &s.pinned, at, len)?;
        }
    }
    let done = s.marker(0, 0);
    s.copies.mark(done)?;
    let since = Instant::now();
    let mut spins = 0u32;
    while !s.copies.reached(done)? {
        spins += 1;
        if spins == SPINS_PER_CHECK {
            spins = 0;
            if since.elapsed() > stall {
                s.quiesce().ok();
                bail!(
                    "a {len}-byte copy {} the GPU did not finish in {:.1} s (--timeout)",
                    if out { "from" } else { "to" },
                    stall.as_secs_f64()
                );
            }
        }
        std::hint::spin_loop();
    }
    Ok(())
}
