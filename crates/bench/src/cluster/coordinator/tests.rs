use super::super::verdict::tests::{pair, sweep};
use super::*;
use crate::cluster::join::{member, never_joined};
use crate::control::Greeting;
use crate::control::{Channel, Joining};
use clap::Parser;
use std::thread;

#[derive(Debug, Parser)]
struct Wrap {
    #[command(flatten)]
    args: super::super::args::ClusterArgs,
}

fn spec(args: &[&str]) -> SweepSpec {
    let mut argv = vec!["cluster", "--timeout", "3"];
    argv.extend_from_slice(args);
    Wrap::try_parse_from(argv).unwrap().args.resolve().unwrap()
}

/// Rank `rank` of `size` joined to rank 0 at `port` with `spec`'s options.
fn joined(port: u16, rank: u32, size: u32, spec: &SweepSpec) -> Channel {
    let t = Duration::from_secs(5);
    let mut ch = Channel::connect("127.0.0.1", port, t, None).unwrap();
    let joining = Joining {
        rank,
        size,
        local_rank: 0,
        options: spec.options.clone(),
        host: "node".into(),
        device: format!("rxe{rank}"),
        fw_ver: None,
        port: 1,
        facts: Default::default(),
    };
    ch.send(&Message::Join(Box::new(joining))).unwrap();
    ch
}

#[test]
fn each_hosts_runs_of_a_round_get_slots_clients_first_then_servers_in_reverse() {
    // Five ranks: 0-3 on node a, 4 on node b. The round (0,1), (2,3), 4 resting: the
    // clients 1 and 3 take slots 0 and 1, the servers 2 and 0 slots 2 and 3.
    let on = |rank: u32, host: &str| {
        let joining = Joining {
            rank,
            size: 5,
            local_rank: rank,
            options: vec![],
            host: host.into(),
            device: format!("rxe{rank}"),
            fw_ver: None,
            port: 1,
            facts: Default::default(),
        };
        member(None, joining, "127.0.0.1".parse().unwrap())
    };
    let members: Vec<Member> = (0..4).map(|r| on(r, "a")).chain([on(4, "b")]).collect();
    let round = [Pair { a: 0, b: 1 }, Pair { a: 2, b: 3 }];
    assert_eq!(cpu_slots(&members, &round), [3, 0, 2, 1, 0]);
    // Across hosts each host numbers its own: (0,4) has both first on theirs.
    let round = [Pair { a: 0, b: 4 }, Pair { a: 1, b: 2 }];
    assert_eq!(cpu_slots(&members, &round)[..3], [2, 1, 0]);
    assert_eq!(cpu_slots(&members, &round)[4], 0);
    let works = pair_works(&members, &[Pair { a: 0, b: 1 }]);
    assert!(
        matches!(works[0], Work::Serve { cpu_slot: 1, .. }),
        "{works:?}"
    );
    assert!(
        matches!(works[1], Work::Measure { cpu_slot: 0, .. }),
        "{works:?}"
    );
}

/// Rank `rank` of `size` joining rank 0 at `port` with `spec`'s options; it hands back
/// rank 0's next word.
fn join(port: u16, rank: u32, size: u32, spec: &SweepSpec) -> thread::JoinHandle<Message> {
    let spec = spec.clone();
    thread::spawn(move || {
        let mut ch = joined(port, rank, size, &spec);
        ch.recv("the sweep's end").unwrap()
    })
}

/// How a fake rank leaves the sweep.
#[derive(Clone, Copy)]
enum Leaves {
    /// Never: it answers every assignment (each test failed, as with no device).
    Never,
    /// It closes its connection when assigned a test of this round.
    Dies(u32),
    /// It stops answering from this round on (a hung process).
    Hangs(u32),
}

/// A rank that joins and answers every assignment until it leaves; hands back how the
/// sweep ended for it, if it heard.
fn fake_rank(
    port: u16,
    rank: u32,
    size: u32,
    spec: &SweepSpec,
    leaves: Leaves,
) -> thread::JoinHandle<Option<(u8, String)>> {
    let spec = spec.clone();
    thread::spawn(move || {
        let mut ch = joined(port, rank, size, &spec);
        loop {
            match ch
                .recv_within("the next step", Duration::from_secs(60))
                .ok()?
            {
                Message::Assign {
                    round,
                    work: Work::Together { serve, measure },
                    ..
                } => {
                    if matches!(leaves, Leaves::Dies(r) if round >= r) {
                        return None;
                    }
                    together(&mut ch, rank, &serve, &measure)?;
                }
                Message::Assign { round, .. } => match leaves {
                    Leaves::Dies(r) if round >= r => return None,
                    Leaves::Hangs(r) if round >= r => {
                        // Reads on, answers nothing, until rank 0 lets it go.
                        let _ = ch.recv_within("nothing", Duration::from_secs(60));
                        return None;
                    }
                    _ => {
                        let error = Some("no device here".to_string());
                        ch.send(&Message::PairDone {
                            record: None,
                            error,
                        })
                        .ok()?;
                    }
                },
                Message::SweepEnd { exit, reason } => return Some((exit, reason)),
                _ => return None,
            }
        }
    })
}

/// A fake rank's part in a congestion round: each sender measures 1 + rank/10 GB/s; a
/// receiver says AtStart, waits for Start, and serves with a 12.5 GB/s ceiling and ECN
/// marks.
fn together(ch: &mut Channel, rank: u32, serve: &[FlowFrom], measure: &[FlowTo]) -> Option<()> {
    if !serve.is_empty() {
        ch.send(&Message::AtStart).ok()?;
        match ch.recv_within("Start", Duration::from_secs(60)).ok()? {
            Message::Start => {}
            _ => return None,
        }
    }
    let served = serve.iter().map(|f| {
        let mut r = crate::compare::tests::record("write-bw", &[(65536, 1.0)]);
        r.ceilings.limit_gbps = Some(12.5);
        r.counters = Some(
            [
                ("hw_counters/np_ecn_marked_roce_packets".to_string(), 40),
                ("hw_counters/rdma_sends".to_string(), 5),
            ]
            .into(),
        );
        (f.client, r)
    });
    let gbps = 1.0 + f64::from(rank) / 10.0;
    let measured = measure.iter().map(|f| {
        let r = crate::compare::tests::record("write-bw", &[(65536, gbps)]);
        (f.server, r)
    });
    let flows = served
        .chain(measured)
        .map(|(peer, r)| FlowDone {
            peer,
            record: Some(Box::new(r)),
            error: None,
        })
        .collect();
    ch.send(&Message::FlowsDone { flows }).ok()
}

#[test]
fn an_incast_round_starts_its_flows_together_and_totals_them_against_the_ceiling() {
    let mut spec = spec_to("incast", "3");
    spec.pattern = super::super::spec::Pattern::Incast;
    (spec.fan_in, spec.root) = (Some(3), Some(0));
    let (end, rec) = sweep_of_four(&spec, [Leaves::Never; 4]);
    assert_eq!(end.exit, 0, "{}", end.reason);
    assert!(
        rec.pairs.is_empty(),
        "a congestion sweep's flows are in its groups"
    );
    let [g] = rec.groups.as_slice() else {
        panic!("one group: {:?}", rec.groups)
    };
    assert_eq!(g.receivers, [0]);
    let senders: Vec<(u32, u32, Option<f64>)> = g
        .flows
        .iter()
        .map(|p| (p.client, p.server, p.value))
        .collect();
    assert_eq!(
        senders,
        [(1, 0, Some(1.1)), (2, 0, Some(1.2)), (3, 0, Some(1.3))]
    );
    assert!((g.total_gbps.unwrap() - 3.6).abs() < 1e-9);
    assert_eq!(g.ceiling_gbps, Some(12.5));
    assert!((g.pct_of_ceiling.unwrap() - 28.8).abs() < 1e-9);
    assert!(g.fairness.unwrap() > 0.99);
    let counters = &g.receiver_counters[&0];
    assert_eq!(
        counters.get("hw_counters/np_ecn_marked_roce_packets"),
        Some(&40)
    );
    assert!(
        !counters.contains_key("hw_counters/rdma_sends"),
        "traffic left out"
    );
    let text = summary::render(&rec);
    assert!(
        text.contains("incast into rank 0 (rxe0 of node), write-bw, round 1: 3 flow(s) at once"),
        "{text}"
    );
    assert!(
        text.contains("total 3.600 GB/s, 29 % of the receiver's ceiling 12.50 GB/s"),
        "{text}"
    );
    assert!(text.contains("np_ecn_marked_roce_packets 40"), "{text}");
}

#[test]
fn a_sender_that_dies_in_an_incast_is_left_out_and_the_others_are_totalled() {
    let mut spec = spec_to("incast-dies", "3");
    spec.pattern = super::super::spec::Pattern::Incast;
    (spec.fan_in, spec.root) = (Some(3), Some(1));
    let leaves = [Leaves::Never, Leaves::Never, Leaves::Never, Leaves::Dies(0)];
    let (end, rec) = sweep_of_four(&spec, leaves);
    assert_eq!(end.exit, 3, "{}", end.reason);
    assert!(rec.ranks[3].unreachable.is_some());
    let [g] = rec.groups.as_slice() else {
        panic!("one group: {:?}", rec.groups)
    };
    let senders: Vec<u32> = g.flows.iter().map(|p| p.client).collect();
    assert_eq!(senders, [2, 0]);
    assert!((g.total_gbps.unwrap() - 2.2).abs() < 1e-9);
}

/// A sweep of four fake ranks; rank 0 coordinates it as the binary does.
fn sweep_of_four(spec: &SweepSpec, leaves: [Leaves; 4]) -> (SweepEnd, SweepRecord) {
    let listener =
        Listener::bind("127.0.0.1", 0, Greeting::coordinator(None, spec.timeout)).unwrap();
    let port = listener.port().unwrap();
    let ranks: Vec<_> = (0..4)
        .filter(|&r| !matches!(leaves[r as usize], Leaves::Dies(0)))
        .map(|r| fake_rank(port, r, 4, spec, leaves[r as usize]))
        .collect();
    let place = Place {
        launcher: super::super::launcher::Launcher::Torchrun,
        rank: 0,
        size: 4,
        local_rank: 0,
    };
    let end = coordinate(spec, &place, &listener).unwrap();
    for r in ranks {
        if let Some((exit, _)) = r.join().unwrap() {
            assert_eq!(exit, end.exit, "every rank that stayed ends alike");
        }
    }
    let path = spec.json.as_ref().unwrap();
    let rec: SweepRecord = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    (end, rec)
}

fn spec_to(name: &str, timeout: &str) -> SweepSpec {
    let dir = std::env::temp_dir().join(format!("rdmabench-coord-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join(format!("{name}.json"));
    let argv = [
        "cluster",
        "--tests",
        "write-bw",
        "-D",
        "1",
        "--timeout",
        timeout,
    ];
    let mut s = Wrap::try_parse_from(argv).unwrap().args.resolve().unwrap();
    s.json = Some(json);
    s
}

#[test]
fn a_rank_that_dies_in_round_2_is_left_out_and_the_others_finish_the_sweep() {
    let spec = spec_to("dies", "3");
    let leaves = [Leaves::Never, Leaves::Never, Leaves::Never, Leaves::Dies(1)];
    let (end, rec) = sweep_of_four(&spec, leaves);
    assert_eq!(end.exit, 3, "{}", end.reason);
    assert_eq!(rec.status, RunStatus::Complete);
    let lost = rec.ranks[3]
        .unreachable
        .as_ref()
        .expect("rank 3 unreachable");
    assert_eq!(lost.round, 1, "{lost:?}");
    assert!(lost.why.contains("closed the connection"), "{}", lost.why);
    assert!(
        rec.named
            .iter()
            .any(|n| n.rank == 3 && n.kind == "unreachable" && n.why.contains("round 2")),
        "{:?}",
        rec.named
    );
    // Rank 3's pair of round 1 was measured; from round 2 on none of its pairs.
    let with_3: Vec<u32> = rec
        .pairs
        .iter()
        .filter(|p| p.client == 3 || p.server == 3)
        .map(|p| p.round)
        .collect();
    assert_eq!(with_3, [0], "{with_3:?}");
    // Every pair of the others was measured in the planned rounds.
    for a in 0..3u32 {
        for b in a + 1..3 {
            assert!(
                rec.pairs.iter().any(|p| !p.retry
                    && ((p.client, p.server) == (a, b) || (p.client, p.server) == (b, a))),
                "pair {a}-{b} measured"
            );
        }
    }
}

#[test]
fn a_rank_that_never_joins_or_hangs_is_left_out_and_the_sweep_goes_on() {
    let spec = spec_to("absent", "1");
    let leaves = [
        Leaves::Never,
        Leaves::Hangs(2),
        Leaves::Never,
        Leaves::Dies(0),
    ];
    let start = Instant::now();
    let (end, rec) = sweep_of_four(&spec, leaves);
    assert_eq!(end.exit, 3, "{}", end.reason);
    assert_eq!(rec.status, RunStatus::Complete);
    let absent = rec.ranks[3]
        .unreachable
        .as_ref()
        .expect("rank 3 unreachable");
    assert_eq!(
        (absent.round, absent.why.as_str()),
        (0, "never joined within 1 s (--timeout)")
    );
    assert_eq!(rec.ranks[3].label, "rank 3");
    let hung = rec.ranks[1]
        .unreachable
        .as_ref()
        .expect("rank 1 unreachable");
    assert_eq!(hung.round, 2, "{hung:?}");
    assert!(hung.why.contains("timed out"), "{}", hung.why);
    assert!(rec.pairs.iter().all(|p| p.client != 3 && p.server != 3));
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn strangers_and_a_taken_rank_are_refused_alone() {
    use std::io::Write as _;
    let ours = spec(&[]);
    let greeting = Greeting::coordinator(None, ours.timeout);
    let listener = Listener::bind("127.0.0.1", 0, greeting).unwrap();
    let port = listener.port().unwrap();
    // Garbage instead of a hello; a peer that greets, then sends no Join.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    raw.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let t = Duration::from_secs(5);
    let silent = thread::spawn(move || {
        let mut ch = Channel::connect("127.0.0.1", port, t, None).unwrap();
        ch.send(&Message::Heartbeat).unwrap();
        ch.recv("anything").is_err()
    });
    let spec = ours.clone();
    let joins = thread::spawn(move || accept_joins(&spec, 3, &listener));
    // In this order: rank 1, rank 1 again, a rank of another launch, ranks 0 and 2.
    let pause = || thread::sleep(Duration::from_millis(300));
    let first = join(port, 1, 3, &ours);
    pause();
    let second = join(port, 1, 3, &ours);
    let outside = join(port, 7, 9, &ours);
    pause();
    let ranks = [join(port, 0, 3, &ours), join(port, 2, 3, &ours)];
    let (members, _) = joins.join().unwrap().unwrap();
    assert!(members.iter().all(|m| m.ch.is_some()));
    for (refused, why) in [
        (
            second,
            "rank 1 has joined already; start one process per rank",
        ),
        (
            outside,
            "rank 7 of 9 is not a rank of this sweep of 3 ranks; start every rank under \
             one launch",
        ),
    ] {
        match refused.join().unwrap() {
            Message::SweepEnd { exit, reason } => assert_eq!((exit, reason.as_str()), (2, why)),
            other => panic!("expected SweepEnd, got {}", other.name()),
        }
    }
    assert!(silent.join().unwrap(), "the peer without a Join is dropped");
    drop(members);
    drop((first, ranks, raw));
}

#[test]
fn a_rank_with_other_options_ends_the_sweep_with_2_everywhere_naming_the_option() {
    let ours = spec(&["-s", "4096"]);
    let greeting = Greeting::coordinator(None, ours.timeout);
    let listener = Listener::bind("127.0.0.1", 0, greeting).unwrap();
    let port = listener.port().unwrap();
    let ranks = [
        join(port, 0, 3, &ours),
        join(port, 1, 3, &ours),
        join(port, 2, 3, &spec(&["-s", "8192"])),
    ];
    let err = accept_joins(&ours, 3, &listener).err().unwrap();
    let why = "rank 2 was started with other sweep options than rank 0 (write-bw size: \
               rank 0 4 KiB, rank 2 8 KiB; write-lat size: rank 0 4 KiB, rank 2 8 KiB); \
               give every rank the same command line";
    assert!(err.is::<PlanError>(), "exit 2: {err}");
    assert_eq!(err.to_string(), why);
    // Every rank, the one at fault and those that joined before or after it.
    for rank in ranks {
        match rank.join().unwrap() {
            Message::SweepEnd { exit, reason } => assert_eq!((exit, reason.as_str()), (2, why)),
            other => panic!("expected SweepEnd, got {}", other.name()),
        }
    }
}

#[test]
fn the_other_ranks_are_told_where_the_verdict_is() {
    let mut pairs = Vec::new();
    for a in 0..4u32 {
        for b in a + 1..4 {
            pairs.push(pair(a, b, if a == 2 || b == 2 { 1.5 } else { 15.0 }));
        }
    }
    let mut rec = sweep(4, pairs);
    judge(&mut rec);
    let end = verdict_end(&rec, Some(Path::new("sweep.json")));
    assert_eq!(end.exit, 3);
    assert_eq!(
        end.reason,
        "1 NIC(s) named: rxe2 of node (slow); the verdict is in rank 0's output (on node) \
         and its record sweep.json"
    );
    let end = verdict_end(&rec, None);
    assert!(
        end.reason
            .ends_with("the verdict is in rank 0's output (on node)"),
        "{}",
        end.reason
    );
}

#[test]
fn failed_tests_are_a_finding_not_the_end_of_the_sweep() {
    let mut pairs = Vec::new();
    for a in 0..4u32 {
        for b in a + 1..4 {
            let mut p = pair(a, b, 15.0);
            if a == 3 || b == 3 {
                (p.value, p.error) = (None, Some("no completion for 30.0 s".into()));
            }
            pairs.push(p);
        }
    }
    let mut rec = sweep(4, pairs);
    judge(&mut rec);
    let end = verdict_end(&rec, None);
    assert_eq!(end.exit, 3, "{}", end.reason);
    assert!(
        end.reason
            .starts_with("1 NIC(s) named: rxe3 of node (failing); 3 test(s) failed;"),
        "{}",
        end.reason
    );
    let mut healthy = sweep(4, Vec::new());
    judge(&mut healthy);
    assert_eq!(verdict_end(&healthy, None).exit, 0);
}

#[test]
fn quick_over_leaves_adds_the_rounds_that_cross_every_pair_of_leaves_three_times() {
    let quick = spec(&[]);
    let members: Vec<Member> = (0..8).map(|r| never_joined(r, 1)).collect();
    let mut rec = sweep(8, Vec::new());
    assert_eq!(planned_rounds(&quick, &members, &rec).unwrap().len(), 3);
    // Four leaves of two ranks: the tournament's first rounds miss some pairs of leaves.
    for r in rec.ranks.iter_mut() {
        r.leaf = Some(format!("leaf{}", r.rank / 2));
    }
    let rounds = planned_rounds(&quick, &members, &rec).unwrap();
    assert!(rounds.len() > 3, "{rounds:?}");
    let mut crossed: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for p in rounds.iter().flatten() {
        let (x, y) = (p.a as u32 / 2, p.b as u32 / 2);
        if x != y {
            *crossed.entry((x.min(y), x.max(y))).or_default() += 1;
        }
    }
    assert_eq!(crossed.len(), 6, "{crossed:?}");
    assert!(crossed.values().all(|&c| c >= 3), "{crossed:?}");
    let pairs = spec(&["--pattern", "pairs"]);
    assert_eq!(planned_rounds(&pairs, &members, &rec).unwrap().len(), 7);
}

/// `--dry-run` plans with the schedule rank 0 runs: 64 nodes of 8 rails, ranks joined
/// with their local ranks, against the dry run's rails (one rank a node per device).
#[test]
fn the_dry_runs_rounds_are_the_sweeps() {
    let rails = "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7";
    for pattern in ["pairs", "quick", "ring", "one-to-all"] {
        let spec = spec(&["--per-rail", "-d", rails, "--pattern", pattern]);
        let members: Vec<Member> = (0..512).map(|r| never_joined(r, 8)).collect();
        let run = planned_rounds(&spec, &members, &sweep(512, Vec::new())).unwrap();
        let local_ranks = super::super::dry_run_local_ranks(512, Some(8));
        let planned = crate::cluster::spec::for_sweep(&spec, &local_ranks).unwrap();
        assert_eq!(planned, run, "{pattern}");
        assert!(
            run.iter().flatten().all(|p| p.a % 8 == p.b % 8),
            "{pattern}"
        );
    }
    let pairs = spec(&["--per-rail", "-d", rails, "--pattern", "pairs"]);
    assert_eq!(
        crate::cluster::spec::for_sweep(&pairs, &vec![0; 512])
            .unwrap()
            .len(),
        511,
        "one rail of 512 ranks"
    );
}

/// A rank's error is a peer's text: it reaches the record and the screen printable.
#[test]
fn a_ranks_error_is_recorded_printable() {
    let rec = sweep(2, Vec::new());
    let test = &spec(&[]).tests[0];
    let answers: (Answer, Answer) = ((None, Some("\u{1b}[2Jgone".into())), (None, None));
    let p = pair_record(&rec, test, 0, &Pair { a: 0, b: 1 }, answers);
    assert_eq!(
        p.error.as_deref(),
        Some("rank 1 (rxe1 of node): \\u{1b}[2Jgone")
    );
}
