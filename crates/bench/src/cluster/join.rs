//! How rank 0 admits the ranks of a launch: each joins with its options, its device and
//! where it listens; one with other options, a rank twice or a rank out of the world is
//! refused naming why; a rank that never joins within the wait is recorded unreachable.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::spec::{differing_options, SweepSpec};
use crate::control::{
    dropped_line, printable, Channel, Joining, Listener, Message, HELLO_DEADLINE,
};
use crate::plan::PlanError;

/// A rank of the launch as rank 0 knows it.
pub(super) struct Member {
    /// Its channel while rank 0 can reach it; `None` once it is unreachable (it never
    /// joined, died, or stopped answering: the record says since when and why).
    pub(super) ch: Option<Channel>,
    /// What it said when it joined (for a rank that never joined, its rank alone).
    pub(super) joining: Joining,
    /// Where its measuring server listens, and where it connects from.
    pub(super) addr: IpAddr,
}

/// Rank 0 holds a connection per rank: lift the soft limit on open files to the hard one
/// when the default (often 1024) would not do.
pub(super) fn raise_file_limit(ranks: usize) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0
            && lim.rlim_cur < (ranks as libc::rlim_t) * 2 + 64
        {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                eprintln!(
                    "rdmabench: cannot raise the open-files limit for {ranks} ranks; raise \
                     `ulimit -n` if rank 0 runs out of file descriptors"
                );
            }
        }
    }
}

/// Every rank's `Join`, within `--timeout`; a rank that did not join by then is left out
/// (unreachable since the first round) and the sweep goes on with the others, unless fewer
/// than two joined. A rank started with other options than rank 0's makes the sweep a usage
/// error: rank 0 tells every rank that the sweep ends with status 2, and keeps taking joins
/// until every rank was heard (or the time is up) so that none is left waiting. A connection
/// that does not join properly (a stranger, garbage, a rank already taken or outside the
/// launch) is refused and dropped alone.
/// Returns the ranks and how long after the start the last one joined.
pub(super) fn accept_joins(
    spec: &SweepSpec,
    size: usize,
    listener: &Listener,
) -> Result<(Vec<Member>, Duration)> {
    let start = Instant::now();
    let deadline = start + spec.timeout;
    let mut last = Duration::ZERO;
    let mut joined: Vec<Option<Member>> = (0..size).map(|_| None).collect();
    let mut refused: Option<String> = None;
    while joined.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(mut ch) = listener.accept_client(left) else {
            break;
        };
        let Some(joining) = join_message(&mut ch) else {
            continue;
        };
        let rank = joining.rank as usize;
        match admission(spec, size, &joined, &joining) {
            Admission::Refuse(why) => {
                eprintln!("rdmabench: refused a Join from {}: {why}", ch.peer());
                end_sweep(&mut ch, 2, &why);
            }
            Admission::EndSweep(why) => {
                end_sweep(&mut ch, 2, &why);
                if refused.is_none() {
                    for ch in joined.iter_mut().flatten().filter_map(|m| m.ch.as_mut()) {
                        end_sweep(ch, 2, &why);
                    }
                    refused = Some(why);
                }
                joined[rank] = Some(member(None, *joining, ch.peer().ip()));
            }
            Admission::Take => {
                if let Some(why) = &refused {
                    end_sweep(&mut ch, 2, why);
                }
                let addr = ch.peer().ip();
                joined[rank] = Some(member(Some(ch), *joining, addr));
                last = start.elapsed();
            }
        }
    }
    if let Some(why) = refused {
        return Err(PlanError::Value(why).into());
    }
    let mut members = absent_ranks(spec, joined)?;
    reachable_addresses(&mut members);
    Ok((members, last))
}

pub(super) fn member(ch: Option<Channel>, joining: Joining, addr: IpAddr) -> Member {
    Member { ch, joining, addr }
}

/// The `Join` a new connection must send at once; anything else drops it, with a line.
pub(super) fn join_message(ch: &mut Channel) -> Option<Box<Joining>> {
    let why = match ch.recv_within("its Join", HELLO_DEADLINE) {
        Ok(Message::Join(joining)) => return Some(joining),
        Ok(other) => format!("it sent {} where a rank sends its Join", other.name()),
        Err(e) => format!("{e:#}"),
    };
    eprintln!("{}", dropped_line(ch.peer(), &why));
    None
}

/// What rank 0 does with a `Join`.
pub(super) enum Admission {
    /// A rank of this launch, joining for the first time.
    Take,
    /// Not a rank of this launch (or one already taken): refused, alone.
    Refuse(String),
    /// A rank of this launch that cannot take part as started: the sweep ends with 2.
    EndSweep(String),
}

/// Whether `joining` takes part in this sweep. The values are the peer's own words: shown as
/// text, never as control sequences.
pub(super) fn admission(
    spec: &SweepSpec,
    size: usize,
    joined: &[Option<Member>],
    joining: &Joining,
) -> Admission {
    let rank = joining.rank;
    if joining.size as usize != size || rank as usize >= size {
        return Admission::Refuse(format!(
            "rank {rank} of {} is not a rank of this sweep of {size} ranks; start every rank \
             under one launch",
            joining.size
        ));
    }
    if joined.get(rank as usize).is_some_and(Option::is_some) {
        return Admission::Refuse(format!(
            "rank {rank} has joined already; start one process per rank"
        ));
    }
    let differ = differing_options(&spec.options, &joining.options, rank);
    if differ.is_empty() {
        return Admission::Take;
    }
    Admission::EndSweep(printable(&format!(
        "rank {rank} was started with other sweep options than rank 0 ({}); give every rank \
         the same command line",
        differ.join("; ")
    )))
}

/// The launch's ranks, those that did not join among them (unreachable since the first
/// round); fewer than two that joined is the end of the sweep (status 1).
pub(super) fn absent_ranks(spec: &SweepSpec, joined: Vec<Option<Member>>) -> Result<Vec<Member>> {
    let missing: Vec<String> = (0..joined.len())
        .filter(|&r| joined[r].is_none())
        .map(|r| r.to_string())
        .collect();
    let mut members: Vec<Member> = Vec::with_capacity(joined.len());
    let per_node = joined
        .iter()
        .flatten()
        .map(|m| m.joining.local_rank + 1)
        .max()
        .unwrap_or(1);
    for (r, slot) in joined.into_iter().enumerate() {
        members.push(slot.unwrap_or_else(|| never_joined(r as u32, per_node)));
    }
    if missing.is_empty() {
        return Ok(members);
    }
    let reason = format!(
        "rank(s) {} did not join within {} s (--timeout)",
        missing.join(", "),
        spec.timeout.as_secs_f64()
    );
    let reachable = members.iter().filter(|m| m.ch.is_some()).count();
    if reachable < 2 || members[0].ch.is_none() {
        for ch in members.iter_mut().filter_map(|m| m.ch.as_mut()) {
            end_sweep(ch, 1, &reason);
        }
        bail!("{reason}");
    }
    println!(
        "rdmabench cluster: {reason}: left out as unreachable; the sweep goes on with \
         {reachable} ranks"
    );
    Ok(members)
}

/// A rank that never joined: its rank alone (with `--per-rail`, the rail its rank would
/// have on nodes of `per_node` ranks).
pub(super) fn never_joined(rank: u32, per_node: u32) -> Member {
    let joining = Joining {
        rank,
        size: 0,
        local_rank: rank % per_node,
        options: Vec::new(),
        host: String::new(),
        device: String::new(),
        fw_ver: None,
        port: 0,
        facts: Default::default(),
    };
    member(None, joining, IpAddr::from([0, 0, 0, 0]))
}

/// Tells one rank the sweep is over; a rank gone already needs no word.
pub(super) fn end_sweep(ch: &mut Channel, exit: u8, reason: &str) {
    let _ = ch.send(&Message::SweepEnd {
        exit,
        reason: reason.to_string(),
    });
}

/// A rank on rank 0's host may have joined over loopback: the others reach it at the
/// address they reached rank 0 at.
pub(super) fn reachable_addresses(members: &mut [Member]) {
    let outside = members
        .iter()
        .find(|m| m.ch.is_some() && !m.addr.is_loopback())
        .and_then(|m| m.ch.as_ref().and_then(Channel::local))
        .map(|a| a.ip());
    if let Some(ip) = outside {
        for m in members.iter_mut().filter(|m| m.addr.is_loopback()) {
            m.addr = ip;
        }
    }
}
