//! `rdmabench`: RDMA bandwidth and latency benchmarks with correct numbers, machine-readable
//! results, and the physical ceilings next to every figure. The work is in the library
//! (`rdmabench::*`); this is the command line's entry point and its exit codes.

use std::process::ExitCode;
use std::thread;

use anyhow::{Context, Result};

use rdmabench::cli::{Cli, Command, TestArgs};
use rdmabench::control::{anyone_may_connect, Greeting, Listener, NoClient, Token};
use rdmabench::exit::Exit;
use rdmabench::plan::{self, TestKind};
use rdmabench::run::rails::rail_devices;
use rdmabench::run::{
    run_client, run_client_rails, run_server, Outcome, RecordFiles, RunOptions, ServerRails,
    ServerSide,
};
use rdmabench::text::printable_within;
use rdmabench::thresholds;

fn main() -> ExitCode {
    // As a C tool: output into a closed pipe (`rdmabench ... | head`) ends the process
    // quietly instead of panicking. Sockets are unaffected (the standard library sends with
    // MSG_NOSIGNAL), so a vanished peer is still an error the run reports.
    // SAFETY: restoring a signal's default disposition at start-up, before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse_args();
    match dispatch(&cli.command) {
        Ok(()) => Exit::Success.into(),
        Err(e) => {
            if let Some(line) = Exit::findings_line(&e) {
                eprintln!("rdmabench: {line}");
            } else if !Exit::already_reported(&e) {
                // One line, whatever the error carries from outside (a device name from a
                // copy of sysfs, a peer's words, a file's name): control characters escaped.
                let line = format!("{e:#}");
                eprintln!("rdmabench: error: {}", printable_within(&line, line.len()));
            }
            Exit::of(&e).into()
        }
    }
}

fn dispatch(command: &Command) -> Result<()> {
    if let Some((kind, args)) = command.test() {
        return run_test(kind, args);
    }
    match command {
        Command::Devices => rdmabench::devices::print_devices(),
        Command::Topo(args) => rdmabench::show::topology::run(args),
        Command::Ceiling(args) => rdmabench::show::ceiling::run(args),
        Command::Doctor(args) => rdmabench::doctor::run(args),
        Command::Health(args) => rdmabench::health::run(args),
        Command::NcclLog(args) => rdmabench::nccl_log::run(args),
        Command::Counters(args) => rdmabench::counters::run(args),
        Command::Compare(args) => rdmabench::compare::run(args),
        Command::Plot(args) => rdmabench::plot::run(args),
        Command::Cluster(args) => rdmabench::cluster::run(args),
        Command::Triage(args) => rdmabench::cluster::triage::run(args),
        Command::Completions(args) => rdmabench::cli::help::run_completions(args),
        Command::Man(args) => rdmabench::cli::help::run_man(args),
        _ => anyhow::bail!("internal error: a test command was not dispatched as a test"),
    }
}

fn run_test(kind: TestKind, args: &TestArgs) -> Result<()> {
    // Every flag is checked together before anything opens, on the server too, and so are
    // the output files.
    let (plan, mut opts) = args.check(kind)?;
    let sysfs = topo::Sysfs::system();
    let rails = match opts.threads {
        1 => rail_devices(&sysfs, args.ib_dev.as_deref(), args.rails.is_some())?,
        // Threads on one device run as that many rails of it: each its own QPs, CQ, buffer,
        // CPU and control connection.
        n => {
            let device = match &args.ib_dev {
                Some(d) => d.clone(),
                None => rail_devices(&sysfs, None, true)?.swap_remove(0),
            };
            vec![device; n as usize]
        }
    };
    opts.side.device = rails.first().cloned();
    let outcome = if args.loopback {
        run_loopback(args, opts, &plan)?
    } else if let Some(host) = &args.server {
        if rails.len() > 1 {
            run_client_rails(&opts, &plan, host, args.control_port(), &rails)?
        } else {
            run_client(&opts, &plan, host, args.control_port())?
        }
    } else {
        // The device (and the GPU) first: a server that could never serve says so at once.
        let side = Side::open(&opts, &rails)?;
        let greeting = Greeting::new(opts.token.clone(), opts.timeout);
        let listener = Listener::bind(&args.bind, args.control_port(), greeting)?;
        let screen = opts.files.screen();
        screen.line(&format!(
            "rdmabench: {kind} server waiting on {}:{} (timeout {} s{})",
            args.bind,
            listener.port()?,
            args.timeout,
            if args.persistent { ", persistent" } else { "" }
        ));
        if opts.token.is_none() {
            screen.line(&anyone_may_connect(&args.bind, listener.port()?));
        }
        if args.persistent {
            return serve_forever(args, &opts, &listener, (side, &rails));
        }
        side.serve(&opts, &listener)?
    };
    check_limits(args, &outcome)
}

/// The server's side: one device, or several rails.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per run; boxing would buy nothing
enum Side {
    One(ServerSide),
    Rails(ServerRails),
}

impl Side {
    fn open(opts: &RunOptions, rails: &[String]) -> Result<Self> {
        if rails.len() > 1 {
            Ok(Side::Rails(ServerRails::open(opts, rails)?))
        } else {
            Ok(Side::One(ServerSide::open(opts)?))
        }
    }

    fn serve(self, opts: &RunOptions, listener: &Listener) -> Result<Outcome> {
        match self {
            Side::One(side) => side.serve(opts, listener),
            Side::Rails(rails) => rails.serve(opts, listener),
        }
    }
}

/// `--persistent`: serve run after run; a failed run is reported and the server goes on.
fn serve_forever(
    args: &TestArgs,
    opts: &RunOptions,
    listener: &Listener,
    (mut side, rails): (Side, &[String]),
) -> Result<()> {
    loop {
        match side.serve(opts, listener) {
            Ok(outcome) => {
                if let Err(e) = check_limits(args, &outcome) {
                    eprintln!("rdmabench: {e:#}");
                }
            }
            Err(e) if e.is::<NoClient>() => {}
            Err(e) => eprintln!("rdmabench: the run failed: {e:#}; waiting for the next client"),
        }
        // Each run prepares its own resources on a freshly opened device.
        side = Side::open(opts, rails)?;
    }
}

/// The limits' verdict on a finished run (its record's files were written as it ran).
fn check_limits(args: &TestArgs, outcome: &Outcome) -> Result<()> {
    let gbits = outcome.record.params.report_gbits;
    thresholds::check(
        &outcome.record.results,
        args.limit_bw,
        args.limit_lat_p99,
        gbits,
    )?;
    Ok(())
}

/// Server (quiet, on `-d`) and client (on `--peer-dev`, default the same) in two threads.
fn run_loopback(args: &TestArgs, opts: RunOptions, plan: &plan::TestPlan) -> Result<Outcome> {
    // Without a token of the user's, one only this process knows: no one else on this host
    // can take the run's place.
    let token = match &opts.token {
        Some(t) => t.clone(),
        None => Token::random().context("no random token for --loopback")?,
    };
    let greeting = Greeting::new(Some(token.clone()), opts.timeout);
    let listener = Listener::bind("127.0.0.1", args.port.unwrap_or(0), greeting)?;
    let port = listener.port()?;
    let server_opts = RunOptions {
        quiet: true,
        request: Default::default(),
        files: RecordFiles::default(),
        ..opts.clone()
    };
    let mut client_opts = opts;
    client_opts.token = Some(token);
    if let Some(dev) = &args.peer_dev {
        client_opts.side.device = Some(dev.clone());
    }
    if let Some(mem) = &args.peer_mem {
        client_opts.side.mem = mem.clone();
        client_opts.side.nearest_gpu = false;
    }
    let server = thread::spawn(move || run_server(&server_opts, &listener));
    let client = run_client(&client_opts, plan, "127.0.0.1", port);
    let server = server
        .join()
        .map_err(|_| anyhow::anyhow!("the loopback server thread panicked"))?;
    match (client, server) {
        (Ok(outcome), Ok(_)) => Ok(outcome),
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(e.context("the loopback server failed")),
    }
}
