//! Several rails in one invocation (`-d mlx5_0,mlx5_1`, `--rails all`): each rail runs the
//! one-device run (`run_client`, the server's `serve`) in a thread of its own, with its own
//! device, QPs, buffers, measuring CPU and control connection; the client opens one connection
//! per rail, each starting with `Message::Rail`, and the server pairs them with its own rails
//! by position. `board.rs` is what the rails share (the terminal, the record, the start of
//! each size), `budget.rs` what a server's rails take together (one plan, their memory
//! within its limits), `combine.rs` the figures of all rails together.

mod board;
mod budget;
mod combine;
pub(crate) mod gpus;

pub(crate) use board::{RailAborted, RailBoard, RailLink};
pub(crate) use budget::RailMem;
#[cfg(test)]
pub(crate) use combine::combined_record;

use std::sync::{mpsc, Arc};
use std::thread;

use anyhow::{anyhow, bail, Context, Result};
use topo::{PathClass, PciFunction, RdmaDevice, Sysfs};

use super::{run_client, Outcome, RecordFiles, RunOptions, ServerSide};
use crate::control::{Channel, Listener, Message, Nonce};
use crate::memory::MemMode;
use crate::plan::{PlanError, TestPlan};
use crate::report::{RunRecord, RunStatus};

/// `-d`'s comma list: each name once, none empty.
pub(crate) fn parse_device_list(text: &str) -> Result<Vec<String>, PlanError> {
    let mut out: Vec<String> = Vec::new();
    for name in text.split(',').map(str::trim) {
        if name.is_empty() {
            return Err(PlanError::Value(format!(
                "-d '{text}': an empty device name; give names separated by commas, as in \
                 -d mlx5_0,mlx5_1"
            )));
        }
        if out.iter().any(|n| n == name) {
            return Err(PlanError::Value(format!(
                "-d '{text}': device {name} is given twice; each rail needs a device of its own"
            )));
        }
        out.push(name.to_string());
    }
    Ok(out)
}

/// Every name of `list` must be among the devices `known` (this host's).
pub(crate) fn check_known(list: &[String], known: &[String]) -> Result<(), PlanError> {
    match list.iter().find(|d| !known.contains(d)) {
        None => Ok(()),
        Some(d) => Err(PlanError::Value(format!(
            "-d: no RDMA device named {d}; this host has {}",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ))),
    }
}

/// The rails `-d` and `--rails all` ask for, from the devices in `sysfs` (read there, not
/// through verbs: opening every device to list it takes seconds on a slow machine): empty
/// for the one device of `-d` left out (the first with an ACTIVE port), one name for one
/// device, several for several rails.
pub fn rail_devices(sysfs: &Sysfs, ib_dev: Option<&str>, all: bool) -> Result<Vec<String>> {
    if all {
        let mut active: Vec<String> = topo::read_rdma_devices(sysfs)?
            .into_iter()
            .filter(|d| d.ports.iter().any(|p| p.is_active()))
            .map(|d| d.name)
            .collect();
        active.sort();
        if active.is_empty() {
            return Err(
                PlanError::Value("--rails all: no RDMA device has an ACTIVE port".into()).into(),
            );
        }
        return Ok(active);
    }
    let Some(text) = ib_dev else {
        return Ok(Vec::new());
    };
    let list = parse_device_list(text)?;
    if list.len() > 1 {
        check_known(&list, &topo::list_rdma_devices(sysfs)?)?;
    }
    Ok(list)
}

/// The server's check of a connection's `Rail`: the client must run as many rails as this
/// side's `own` devices. Returns the rail's index and the client's run.
pub(crate) fn read_rail(ch: &mut Channel, own: &[String]) -> Result<(usize, String)> {
    let Message::Rail {
        index,
        count,
        devices,
        run,
    } = ch.expect("Rail")?
    else {
        bail!("protocol error: expected the client's rail");
    };
    if count as usize != own.len() {
        return Err(PlanError::Value(format!(
            "the client runs {count} rail(s) ({}), this server {} ({}): start both sides with \
             the same number of devices in -d, and the same --threads",
            crate::control::printable(&devices.join(",")),
            own.len(),
            own.join(",")
        ))
        .into());
    }
    if index >= count {
        bail!("protocol error: the client sent rail {index} of {count}");
    }
    Ok((index as usize, run))
}

/// The `Rail` message of rail `link` (rail 0 of 1 without one).
pub(crate) fn rail_message(opts: &RunOptions, device: &str) -> Message {
    match &opts.rail {
        Some(l) => Message::Rail {
            index: l.index as u32,
            count: l.board.count() as u32,
            devices: l.board.devices.clone(),
            run: l.board.run.clone(),
        },
        None => Message::Rail {
            index: 0,
            count: 1,
            devices: vec![device.to_string()],
            run: String::new(),
        },
    }
}

/// The client side of a run on `devices` (two or more), against the server at `host`:`port`.
pub fn run_client_rails(
    opts: &RunOptions,
    plan: &TestPlan,
    host: &str,
    port: u16,
    devices: &[String],
) -> Result<Outcome> {
    let board = new_board(opts, devices)?;
    let mems = rail_mems(opts, devices)?;
    let items = (0..devices.len())
        .map(|k| rail_options(opts, &board, k, &mems[k]))
        .collect();
    let results = in_threads(&board, items, |_, o: RunOptions| {
        run_client(&o, plan, host, port)
    });
    finish(opts, &board, results)
}

fn new_board(opts: &RunOptions, devices: &[String]) -> Result<Arc<RailBoard>> {
    let run = Nonce::new()
        .map_err(|e| anyhow!("no random bytes for the rails' run: {e}"))?
        .to_base64();
    Ok(Arc::new(RailBoard::new(
        devices.to_vec(),
        run,
        opts.quiet,
        opts.timeout,
        opts.files.clone(),
    )))
}

/// Each rail's memory: with GPU memory, its own GPU (`gpus.rs`).
fn rail_mems(opts: &RunOptions, devices: &[String]) -> Result<Vec<MemMode>> {
    let topology = match opts.side.mem {
        MemMode::Host => None,
        _ => topo::Topology::scan(&Sysfs::system()).ok(),
    };
    Ok(gpus::rail_mems(
        &opts.side.mem,
        &opts.rail_gpus,
        devices,
        topology.as_ref(),
    )?)
}

/// Rail `k`'s options: its device and memory, its place on the board; its record goes
/// through the board, and no progress bar (the rails' rows come together).
fn rail_options(opts: &RunOptions, board: &Arc<RailBoard>, k: usize, mem: &MemMode) -> RunOptions {
    let mut o = opts.clone();
    o.side.device = board.devices.get(k).cloned();
    o.side.mem = mem.clone();
    // The rails chose their GPUs together (gpus.rs).
    o.side.nearest_gpu = false;
    o.files = RecordFiles::default();
    o.progress = false;
    o.rail = Some(RailLink {
        index: k,
        board: Arc::clone(board),
    });
    o
}

/// Runs `work` on every item, each in a thread of its own; a rail that fails stops the others.
fn in_threads<T: Send>(
    board: &RailBoard,
    items: Vec<T>,
    work: impl Fn(usize, T) -> Result<Outcome> + Sync,
) -> Vec<Result<Outcome>> {
    thread::scope(|scope| {
        let handles: Vec<_> = items
            .into_iter()
            .enumerate()
            .map(|(k, item)| {
                let work = &work;
                scope.spawn(move || {
                    let r = work(k, item);
                    if let Err(e) = &r {
                        board.abort(k, e);
                    }
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("a rail's thread panicked")))
            })
            .collect()
    })
}

/// A multi-rail server's rails, opened and checked before it says that it waits.
#[derive(Debug)]
pub struct ServerRails {
    board: Arc<RailBoard>,
    sides: Vec<(RunOptions, ServerSide)>,
}

impl ServerRails {
    /// Opens every rail's device (and GPU), each with its CPU.
    pub fn open(opts: &RunOptions, devices: &[String]) -> Result<Self> {
        let board = new_board(opts, devices)?;
        let mems = rail_mems(opts, devices)?;
        let mut sides = Vec::new();
        for (k, mem) in mems.iter().enumerate() {
            let o = rail_options(opts, &board, k, mem);
            let side = ServerSide::open(&o).with_context(|| format!("rail {k}"))?;
            board.budget.register(k, side.rail_mem());
            sides.push((o, side));
        }
        Ok(ServerRails { board, sides })
    }

    /// Waits for one client's rails on `listener` and serves its run on every rail.
    pub fn serve(self, opts: &RunOptions, listener: &Listener) -> Result<Outcome> {
        let channels = accept_rails(opts, listener, &self.board.devices)?;
        let items: Vec<_> = self.sides.into_iter().zip(channels).collect();
        let results = in_threads(&self.board, items, |_, ((o, side), ch)| {
            side.serve_channel(&o, ch)
        });
        finish(opts, &self.board, results)
    }
}

/// The client's connections, one per rail, in rail order.
fn accept_rails(opts: &RunOptions, listener: &Listener, own: &[String]) -> Result<Vec<Channel>> {
    let (mut first, rails) = listener.accept_run(opts.timeout, own.len() - 1)?;
    if !opts.quiet {
        opts.files
            .screen()
            .line(&format!("rdmabench: client {} connected", first.peer()));
    }
    let mut slots: Vec<Option<Channel>> = own.iter().map(|_| None).collect();
    let first_index = match take_rails(opts, &rails, own, &mut first, &mut slots) {
        Ok(k) => k,
        Err(e) => {
            first.end_with("the server", &e);
            for ch in slots.iter_mut().flatten() {
                ch.end_with("the server", &e);
            }
            return Err(e);
        }
    };
    slots[first_index] = Some(first);
    slots
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| anyhow!("internal error: a rail's connection is missing"))
}

/// Reads the first connection's rail, then takes the others' connections into `slots` (the
/// first's slot is left for it); returns the first's rail.
fn take_rails(
    opts: &RunOptions,
    rails: &mpsc::Receiver<Channel>,
    own: &[String],
    first: &mut Channel,
    slots: &mut [Option<Channel>],
) -> Result<usize> {
    let (first_index, run) = read_rail(first, own)?;
    for _ in 1..own.len() {
        let mut ch = rails.recv_timeout(opts.timeout).map_err(|_| {
            anyhow!(
                "the client's other rails did not connect within {} s (--timeout)",
                opts.timeout.as_secs_f64()
            )
        })?;
        let (k, theirs) = read_rail(&mut ch, own)?;
        if theirs != run || k == first_index || slots[k].is_some() {
            let e = anyhow!("a connection for rail {k} that is not the running client's");
            ch.end_with("the server", &e);
            return Err(e);
        }
        slots[k] = Some(ch);
    }
    Ok(first_index)
}

/// The end of a multi-rail run: the combined record (with a note when the rails share a
/// PCIe link that may bound them) written, or the most telling rail's error.
fn finish(opts: &RunOptions, board: &RailBoard, results: Vec<Result<Outcome>>) -> Result<Outcome> {
    let errors: Vec<(usize, anyhow::Error)> = results
        .into_iter()
        .enumerate()
        .filter_map(|(k, r)| r.err().map(|e| (k, e)))
        .collect();
    let record = board.combined();
    if errors.is_empty() {
        let mut record = record.ok_or_else(|| anyhow!("internal error: no rail's record"))?;
        if let Some(note) = shared_pcie_note(&board.devices, &record) {
            if !opts.quiet {
                opts.files.screen().line(&format!(" note: {note}"));
            }
            record.notes.push(note);
        }
        board.write_final(&record)?;
        return Ok(Outcome { record });
    }
    if let Some(mut record) = record {
        record.status = RunStatus::Failed;
        let text: Vec<String> = errors
            .iter()
            .map(|(k, e)| format!("rail {k} ({}): {e:#}", board.devices[*k]))
            .collect();
        record.error = Some(text.join("; "));
        if let Err(w) = board.write_final(&record) {
            eprintln!("rdmabench: the partial record was not written: {w:#}");
        }
    }
    Err(telling(board, errors))
}

/// The error the run ends with: a refused plan first (exit 2), else the first rail that failed
/// of itself (not stopped because another did).
fn telling(board: &RailBoard, mut errors: Vec<(usize, anyhow::Error)>) -> anyhow::Error {
    let pick = errors
        .iter()
        .position(|(_, e)| e.is::<PlanError>())
        .or_else(|| errors.iter().position(|(_, e)| !e.is::<RailAborted>()))
        .unwrap_or(0);
    if pick >= errors.len() {
        return anyhow!("the run failed on a rail");
    }
    let (k, e) = errors.swap_remove(pick);
    let dev = board.devices.get(k).map_or("?", String::as_str);
    e.context(format!("rail {k} ({dev})"))
}

/// When all rails together reach well below the sum of their ceilings (under 80% at every
/// size), and two rails' NICs share a PCIe switch or root port, says so: that link carries
/// both and may be what bounds them.
fn shared_pcie_note(devices: &[String], record: &RunRecord) -> Option<String> {
    let best = record
        .results
        .iter()
        .filter_map(|r| r.pct_of_ceiling)
        .reduce(f64::max)?;
    if best >= 80.0 {
        return None;
    }
    let sysfs = Sysfs::system();
    let nics: Vec<(&String, PciFunction)> = devices
        .iter()
        .filter_map(|d| Some((d, RdmaDevice::read(&sysfs, d).ok()?.pci?)))
        .collect();
    for (i, (a, fa)) in nics.iter().enumerate() {
        for (b, fb) in nics.iter().skip(i + 1) {
            let Ok(path) = topo::pair_path(&sysfs, fa, fb) else {
                continue;
            };
            if let Some(what) = shared_upstream(path.class, path.common_ancestor.as_deref()) {
                return Some(format!(
                    "all rails reached at best {best:.0}% of their summed ceilings, and {a} and \
                     {b} share {what} ({}): their traffic crosses its link together, which may \
                     bound them",
                    path.class
                ));
            }
        }
    }
    None
}

/// What two NICs on a path of `class` share above them: a switch port, or a root port.
fn shared_upstream(class: PathClass, ancestor: Option<&str>) -> Option<String> {
    let ancestor = ancestor?;
    match class {
        PathClass::Pix | PathClass::Pxb => Some(format!("the PCIe switch port {ancestor}")),
        PathClass::Phb => Some(format!("the PCIe root port {ancestor}")),
        PathClass::Node | PathClass::Sys => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::Greeting;
    use std::time::Duration;

    fn quiet_options() -> RunOptions {
        use clap::Parser;
        let cli =
            crate::cli::Cli::try_parse_from(["rdmabench", "write-bw", "--timeout", "5"]).unwrap();
        let (kind, args) = cli.command.test().unwrap();
        RunOptions {
            quiet: true,
            ..args.run_options(kind).unwrap()
        }
    }

    /// A client's connections to `port`, one per `(index, count)` in that order, each
    /// followed by a `StartSize` whose size is its index (to tell them apart).
    fn connect_rails(port: u16, rails: Vec<(u32, u32)>) -> thread::JoinHandle<Vec<Channel>> {
        thread::spawn(move || {
            let mut out = Vec::new();
            for (index, count) in rails {
                let t = Duration::from_secs(5);
                let mut ch = Channel::connect("127.0.0.1", port, t, None).unwrap();
                let devices = vec!["x".to_string(); count as usize];
                let run = "r".to_string();
                let rail = Message::Rail {
                    index,
                    count,
                    devices,
                    run,
                };
                ch.send(&rail).unwrap();
                let size = u64::from(index);
                ch.send(&Message::StartSize { size, rep: 0 }).unwrap();
                out.push(ch);
            }
            out
        })
    }

    fn listen() -> Listener {
        let greeting = Greeting::new(None, Duration::from_secs(5));
        Listener::bind("127.0.0.1", 0, greeting).unwrap()
    }

    #[test]
    fn rails_pair_by_their_index_whatever_order_they_connect_in() {
        let l = listen();
        let client = connect_rails(l.port().unwrap(), vec![(1, 2), (0, 2)]);
        let own = vec!["rxe0".to_string(), "rxe1".to_string()];
        let channels = accept_rails(&quiet_options(), &l, &own).unwrap();
        let _client = client.join().unwrap();
        for (k, mut ch) in channels.into_iter().enumerate() {
            let Message::StartSize { size, .. } = ch.expect("StartSize").unwrap() else {
                panic!("not a StartSize");
            };
            assert_eq!(size, k as u64);
        }
    }

    #[test]
    fn a_differing_rail_count_is_refused_on_both_sides_naming_both() {
        let l = listen();
        let client = connect_rails(l.port().unwrap(), vec![(0, 1)]);
        let own = vec!["rxe0".to_string(), "rxe1".to_string()];
        let e = accept_rails(&quiet_options(), &l, &own).unwrap_err();
        assert!(e.is::<PlanError>());
        let said = "the client runs 1 rail(s) (x), this server 2 (rxe0,rxe1)";
        assert!(e.to_string().starts_with(said), "{e}");
        let mut ch = client.join().unwrap().pop().unwrap();
        let e = ch.expect("PlanAccepted").unwrap_err();
        assert!(e.is::<PlanError>() && e.to_string().contains(said), "{e}");
    }

    #[test]
    fn rails_all_takes_the_devices_with_an_active_port_in_name_order() {
        use crate::sysroot::fixture;
        let all = |f| rail_devices(&fixture(f), None, true).unwrap();
        assert_eq!(all("dgx-h100"), ["mlx5_0", "mlx5_1"]);
        // mlx5_1's port is DOWN there.
        assert_eq!(all("two-socket"), ["mlx5_0"]);
        let list = rail_devices(&fixture("dgx-h100"), Some("mlx5_1,mlx5_0"), false).unwrap();
        assert_eq!(list, ["mlx5_1", "mlx5_0"]);
        let e = rail_devices(&fixture("dgx-h100"), Some("mlx5_0,rxe9"), false).unwrap_err();
        assert!(e.is::<PlanError>());
        assert!(
            e.to_string()
                .ends_with("no RDMA device named rxe9; this host has mlx5_0, mlx5_1"),
            "{e}"
        );
        assert!(rail_devices(&fixture("dgx-h100"), None, false)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_device_list_parses_in_order_and_refuses_duplicates_and_gaps() {
        assert_eq!(
            parse_device_list("mlx5_0, mlx5_1").unwrap(),
            vec!["mlx5_0".to_string(), "mlx5_1".to_string()]
        );
        assert_eq!(parse_device_list("rxe0").unwrap(), vec!["rxe0".to_string()]);
        let e = parse_device_list("rxe0,rxe1,rxe0")
            .unwrap_err()
            .message()
            .to_string();
        assert!(e.contains("device rxe0 is given twice"), "{e}");
        let e = parse_device_list("rxe0,,rxe1")
            .unwrap_err()
            .message()
            .to_string();
        assert!(e.contains("'rxe0,,rxe1': an empty device name"), "{e}");
    }

    #[test]
    fn an_unknown_device_is_named_with_the_ones_that_exist() {
        let known = vec!["rxe0".to_string(), "rxe1".to_string()];
        let list = vec!["rxe0".to_string(), "mlx5_9".to_string()];
        let e = check_known(&list, &known)
            .unwrap_err()
            .message()
            .to_string();
        assert_eq!(
            e,
            "-d: no RDMA device named mlx5_9; this host has rxe0, rxe1"
        );
        assert!(check_known(&known, &known).is_ok());
        let e = check_known(&list, &[]).unwrap_err().message().to_string();
        assert!(e.ends_with("this host has none"), "{e}");
    }

    #[test]
    fn a_shared_switch_or_root_port_is_named_and_separate_bridges_are_not() {
        let at = |class| shared_upstream(class, Some("0000:40:01.0"));
        assert_eq!(
            at(PathClass::Pix).as_deref(),
            Some("the PCIe switch port 0000:40:01.0")
        );
        assert_eq!(
            at(PathClass::Phb).as_deref(),
            Some("the PCIe root port 0000:40:01.0")
        );
        assert_eq!(at(PathClass::Node), None);
        assert_eq!(shared_upstream(PathClass::Phb, None), None);
    }
}
