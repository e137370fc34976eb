//! `rdmabench`: RDMA bandwidth and latency benchmarks with correct numbers, machine-readable
//! results, and the physical ceilings next to every figure. The work is in the library
//! (`rdmabench::*`); this is the command line's entry point and its exit codes.

use std::process::ExitCode;
use std::thread;

use anyhow::{Context, Result};
use clap::Parser;

use rdmabench::cli::{Cli, Command, TestArgs};
use rdmabench::control::{anyone_may_connect, Greeting, Listener, NoClient, Token};
use rdmabench::exit::Exit;
use rdmabench::plan::{self, TestKind};
use rdmabench::report::{export, CsvExporter, JsonExporter};
use rdmabench::run::{run_client, run_server, Outcome, RunOptions};
use rdmabench::thresholds;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(&cli.command) {
        Ok(()) => Exit::Success.into(),
        Err(e) => {
            if !Exit::already_reported(&e) {
                eprintln!("rdmabench: error: {e:#}");
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
        Command::Compare(args) => rdmabench::compare::run(args),
        Command::Plot(args) => rdmabench::plot::run(args),
        _ => anyhow::bail!("internal error: a test command was not dispatched as a test"),
    }
}

fn run_test(kind: TestKind, args: &TestArgs) -> Result<()> {
    let request = args.plan.clone();
    // Every flag is checked together before anything opens, on the server too.
    let plan = request.resolve(kind)?;
    let opts = RunOptions {
        test: kind,
        side: args.side()?,
        request,
        timeout: args.timeout(),
        report_gbits: args.report_gbits,
        quiet: false,
        progress: true,
        clock: args.clock.unwrap_or_default(),
        pin: args.pin(),
        token: args.token()?,
        admission: args.admission.clone(),
    };
    let outcome = if args.loopback {
        run_loopback(args, opts, &plan)?
    } else if let Some(host) = &args.server {
        run_client(&opts, &plan, host, args.control_port())?
    } else {
        let greeting = Greeting::new(opts.token.clone(), opts.timeout);
        let listener = Listener::bind(&args.bind, args.control_port(), greeting)?;
        println!(
            "rdmabench: {kind} server waiting on {}:{} (timeout {} s{})",
            args.bind,
            listener.port()?,
            args.timeout,
            if args.persistent { ", persistent" } else { "" }
        );
        if opts.token.is_none() {
            println!("{}", anyone_may_connect(&args.bind, listener.port()?));
        }
        if args.persistent {
            return serve_forever(args, &opts, &listener);
        }
        run_server(&opts, &listener)?
    };
    write_outputs(args, &outcome)
}

/// `--persistent`: serve run after run; a failed run is reported and the server goes on.
fn serve_forever(args: &TestArgs, opts: &RunOptions, listener: &Listener) -> Result<()> {
    loop {
        match run_server(opts, listener) {
            Ok(outcome) => {
                if let Err(e) = write_outputs(args, &outcome) {
                    eprintln!("rdmabench: {e:#}");
                }
            }
            Err(e) if e.is::<NoClient>() => {}
            Err(e) => eprintln!("rdmabench: the run failed: {e:#}; waiting for the next client"),
        }
    }
}

/// The record's files and the limits' verdict.
fn write_outputs(args: &TestArgs, outcome: &Outcome) -> Result<()> {
    if let Some(path) = &args.json {
        export(&JsonExporter, &outcome.record, path)
            .with_context(|| format!("writing the JSON record to '{}'", path.display()))?;
    }
    if let Some(path) = &args.csv {
        export(&CsvExporter, &outcome.record, path)
            .with_context(|| format!("writing the CSV to '{}'", path.display()))?;
    }
    thresholds::check(&outcome.record.results, args.limit_bw, args.limit_lat_p99)?;
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
        ..opts.clone()
    };
    let mut client_opts = opts;
    client_opts.token = Some(token);
    if let Some(dev) = &args.peer_dev {
        client_opts.side.device = Some(dev.clone());
    }
    if let Some(mem) = &args.peer_mem {
        client_opts.side.mem = mem.clone();
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
