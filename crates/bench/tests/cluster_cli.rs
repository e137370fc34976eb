//! `rdmabench cluster` on a machine without RDMA devices: `--dry-run` shows what a rank would
//! do under each launcher without contacting anyone, and options that cannot run are refused
//! before anything opens.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

/// Every variable a launcher sets, cleared so that the test's own environment cannot leak in.
const LAUNCHER_VARS: [&str; 16] = [
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK",
    "PMI_SIZE",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "MPI_LOCALRANKID",
];

fn cluster(env: &[(&str, &str)], args: &[&str]) -> Output {
    launched("cluster", env, args)
}

fn triage(env: &[(&str, &str)], args: &[&str]) -> Output {
    launched("triage", env, args)
}

/// `rdmabench COMMAND ARGS` with the launcher's variables `env` and no others.
fn launched(command: &str, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rdmabench"));
    for v in LAUNCHER_VARS {
        cmd.env_remove(v);
    }
    cmd.envs(env.iter().copied()).arg(command).args(args);
    cmd.output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

const SLURM: [(&str, &str); 4] = [
    ("SLURM_PROCID", "3"),
    ("SLURM_NTASKS", "8"),
    ("SLURM_LOCALID", "1"),
    ("SLURM_JOB_NODELIST", "node[01-04,07],gpu9"),
];

#[test]
fn a_dry_run_under_slurm_shows_the_ranks_view_and_contacts_nobody() {
    let out = cluster(&SLURM, &["--dry-run", "-d", "mlx5_0"]);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    for line in [
        "launcher     Slurm (srun)",
        "rank         3 of 8 (local rank 1)",
        "device       mlx5_0",
        "coordinator  node01:18516 (from the first host of SLURM_JOB_NODELIST)",
        "pattern      quick: 3 rounds",
        "cost         3 rounds x (1.00 s + 0.01 s of tests + 2 x 2.0 s of set-up) = about 15 s, \
         plus retries, re-runs and up to 3 rounds to decide a cut",
        "tests        write-bw, write-lat",
    ] {
        assert!(shown.contains(line), "missing {line:?} in:\n{shown}");
    }
}

#[test]
fn per_rail_ranks_take_the_device_at_their_local_rank() {
    let out = cluster(
        &SLURM,
        &["--dry-run", "--per-rail", "-d", "mlx5_0,mlx5_1,mlx5_2"],
    );
    assert!(text(&out).contains("device       mlx5_1"), "{}", text(&out));
    let out = cluster(&SLURM, &["--dry-run", "-d", "mlx5_0,mlx5_1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("add --per-rail"), "{}", text(&out));
}

#[test]
fn open_mpi_and_torchrun_are_found_and_an_explicit_coordinator_wins() {
    let ompi = [
        ("OMPI_COMM_WORLD_RANK", "0"),
        ("OMPI_COMM_WORLD_SIZE", "5"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        ("MASTER_ADDR", "ignored"),
    ];
    let out = cluster(
        &ompi,
        &["--dry-run", "--coordinator", "n1:2000", "--pattern", "ring"],
    );
    let shown = text(&out);
    assert!(shown.contains("Open MPI (mpirun)"), "{shown}");
    assert!(shown.contains("n1:2000 (from --coordinator)"), "{shown}");
    assert!(shown.contains("ring: 3 rounds"), "{shown}");
    let torch = [
        ("RANK", "1"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "10.0.0.1"),
        ("MASTER_PORT", "29500"),
    ];
    let shown = text(&cluster(&torch, &["--dry-run"]));
    assert!(shown.contains("torchrun"), "{shown}");
    assert!(
        shown.contains("10.0.0.1:29500 (from MASTER_ADDR/MASTER_PORT)"),
        "{shown}"
    );
}

#[test]
fn a_topology_is_read_before_anything_and_a_bad_one_refused_naming_its_line() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/topology");
    for (file, says) in [
        ("fabric.txt", "topology     host list: 7 hosts on 2 leaves"),
        (
            "ibnetdiscover.txt",
            "topology     ibnetdiscover: 7 hosts on 2 leaves",
        ),
        (
            "iblinkinfo.txt",
            "topology     iblinkinfo: 7 hosts on 2 leaves",
        ),
        ("lldp", "topology     lldpcli JSON: 3 hosts on 2 leaves"),
    ] {
        let path = format!("{fixtures}/{file}");
        let out = cluster(&SLURM, &["--dry-run", "--topology", &path]);
        assert!(out.status.success(), "{file}: {}", text(&out));
        assert!(text(&out).contains(says), "{file}: {}", text(&out));
        assert!(
            text(&out).contains(
                "pattern      quick: 3 rounds, and those that cross every pair of leaves 3 times"
            ),
            "{file}: {}",
            text(&out)
        );
    }
    let bad = std::env::temp_dir().join(format!("rdmabench-topology-{}", std::process::id()));
    std::fs::write(&bad, "node1 leaf1\nnode2\n").unwrap();
    let out = cluster(&SLURM, &["--dry-run", "--topology", bad.to_str().unwrap()]);
    std::fs::remove_file(&bad).unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let shown = text(&out);
    assert!(
        shown.contains(&format!("--topology {}: line 2: 'node2'", bad.display()))
            && shown.contains("HOST LEAF [RAIL]"),
        "{shown}"
    );
}

#[test]
fn a_dry_run_plans_an_incast_into_every_rank_in_fan_in_plus_one_rounds() {
    let ranks = [
        ("RANK", "5"),
        ("WORLD_SIZE", "1024"),
        ("MASTER_ADDR", "n1"),
        ("MASTER_PORT", "2000"),
    ];
    let out = cluster(
        &ranks,
        &["--dry-run", "--pattern", "incast", "--fan-in", "3"],
    );
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    for line in [
        "pattern      incast: 4 rounds",
        "tests        write-bw\n",
        "cost         4 rounds x (1.00 s of tests + 1 x 2.0 s of set-up) = about 12 s\n",
    ] {
        assert!(shown.contains(line), "missing {line:?} in:\n{shown}");
    }
    // A plan that cannot be built is shown, then refused: exit 2, never a dry run that passed.
    let out = cluster(&ranks, &["--dry-run", "--pattern", "all-to-all"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(
            "pattern      all-to-all: cannot be built: all-to-all takes at most 16 ranks"
        ),
        "{}",
        text(&out)
    );
    let four = [
        ("RANK", "0"),
        ("WORLD_SIZE", "4"),
        ("MASTER_ADDR", "n1"),
        ("MASTER_PORT", "2000"),
    ];
    let out = cluster(
        &four,
        &["--dry-run", "--pattern", "incast", "--fan-in", "7"],
    );
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(2), "{shown}");
    assert!(
        shown.contains("pattern      incast: cannot be built")
            && String::from_utf8_lossy(&out.stderr).contains(
                "rdmabench: error: --pattern incast cannot be built for 4 ranks: --fan-in 7 \
                 needs 8 ranks"
            ),
        "{shown}"
    );
}

/// 64 nodes of 8 rails: `--per-rail` plans what the sweep runs, each rail's 64 ranks among
/// themselves side by side (63 rounds of `pairs`, 3 of `quick`), not all 512 ranks together
/// (511 rounds).
#[test]
fn a_per_rail_dry_run_plans_each_rails_rounds_side_by_side() {
    let slurm = [
        ("SLURM_PROCID", "9"),
        ("SLURM_NTASKS", "512"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_JOB_NODELIST", "node[001-064]"),
    ];
    let rails = "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7";
    for (pattern, rounds) in [("pairs", 63), ("quick", 3), ("ring", 2)] {
        let out = cluster(
            &slurm,
            &["--dry-run", "--per-rail", "-d", rails, "--pattern", pattern],
        );
        let shown = text(&out);
        assert!(out.status.success(), "{shown}");
        let line = format!(
            "pattern      {pattern}: {rounds} rounds, the 8 rail(s) side by side (8 rank(s) a \
             node, one on each device of -d; ranks meet their own rail's)\n"
        );
        assert!(shown.contains(&line), "missing {line:?} in:\n{shown}");
        assert!(
            shown.contains(&format!("cost         {rounds} rounds x")),
            "{shown}"
        );
    }
    let out = cluster(&slurm, &["--dry-run", "--pattern", "pairs"]);
    assert!(text(&out).contains("pairs: 511 rounds\n"), "{}", text(&out));
}

#[test]
fn what_cannot_run_is_refused_with_exit_2_naming_it() {
    let out = cluster(&[], &["--dry-run"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("no launcher found"), "{}", text(&out));
    let out = cluster(&[("RANK", "4"), ("WORLD_SIZE", "4")], &["--dry-run"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("RANK=4"), "{}", text(&out));
    for (args, says) in [
        (&["--tests", "fast-bw"][..], "'fast-bw' is not a test"),
        (&["somehost"][..], "SERVER_HOST has no meaning"),
        (&["--pattern", "file"][..], "--pairs-file"),
        (&["--rails", "all"][..], "--rails has no meaning"),
        (
            &["--pattern", "incast"][..],
            "--pattern incast needs --fan-in K",
        ),
        (
            &["--pattern", "bisection", "--tests", "write-lat"][..],
            "write-lat is a latency test",
        ),
    ] {
        let out = cluster(&SLURM, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(says), "{args:?}: {}", text(&out));
    }
}

/// `triage --dry-run` states the most rounds it may take, logarithmic in the ranks, and their
/// cost, contacting nobody, in well under a second at any size.
#[test]
fn a_triage_dry_run_states_its_bound_at_1024_and_100000_ranks() {
    for (ranks, split, all, secs) in [("1024", 11, 12, 48), ("100000", 18, 19, 76)] {
        let env = [
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", ranks),
            ("SLURM_LOCALID", "0"),
            ("SLURM_JOB_NODELIST", "node[00001-99999]"),
        ];
        let started = std::time::Instant::now();
        let out = triage(&env, &["--dry-run", "-d", "mlx5_0"]);
        let took = started.elapsed().as_secs_f64();
        let shown = text(&out);
        eprintln!("{ranks} ranks in {took:.2} s:\n{shown}");
        assert!(out.status.success(), "{shown}");
        for line in [
            format!("rank         0 of {ranks} (local rank 0)"),
            format!(
                "plan         the ring, then at most {split} rounds of split: halves, pairs \
                 across, known-good partners ({all} in all)"
            ),
            "flows        write-bw (64 KiB, 2 s), every flow of a round at once".into(),
            format!(
                "cost         {all} rounds x (2.00 s + 2.0 s of set-up) = at most about {secs} s"
            ),
        ] {
            assert!(shown.contains(&line), "missing {line:?} in:\n{shown}");
        }
        assert!(took < 5.0, "{took} s");
    }
}

#[test]
fn triage_refuses_what_it_cannot_judge_with_before_contacting_anyone() {
    let env = [
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "4"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_JOB_NODELIST", "node[1-4]"),
    ];
    let dir = std::env::temp_dir().join(format!("rdmabench-triage-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sweep = dir.join("sweep.json");
    std::fs::write(&sweep, r#"{"schema": "rdmabench.cluster/1"}"#).unwrap();
    let missing = dir.join("missing.json");
    for (args, says) in [
        (
            vec!["--dry-run", "--expect", sweep.to_str().unwrap()],
            "has schema 'rdmabench.cluster/1', not 'rdmabench.triage/1'",
        ),
        (
            vec!["--dry-run", "--expect", missing.to_str().unwrap()],
            "--expect: cannot read the --expect record",
        ),
        (
            vec!["--dry-run", "-d", "mlx5_0,mlx5_1"],
            "-d lists several devices",
        ),
        (vec!["--dry-run", "--min-pct", "0"], "--min-pct"),
    ] {
        let out = triage(&env, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(says), "{args:?}: {}", text(&out));
    }
    std::fs::remove_dir_all(dir).ok();
}
