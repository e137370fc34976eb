//! A server nobody can block or exhaust, end to end between rxe0 and rxe1: a silent connection
//! or more strangers than greeting slots do not spoil a run, a wrong token fails both sides
//! clearly, and a plan above the server's memory limit is refused before anything is
//! allocated.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{
    bin, client, client_args, rdma_ready, scratch, server_args, text, Server, SERVER_ADDR,
};

/// A short write-bw run: what a client asks for where the size does not matter.
const SHORT: [&str; 4] = ["-s", "4K", "-n", "100"];

#[test]
fn a_silent_connection_just_before_a_client_does_not_affect_the_run() {
    if !rdma_ready("a_silent_connection_just_before_a_client_does_not_affect_the_run") {
        return;
    }
    let server = Server::start(&server_args("write-bw", 19430, 10, &[]));
    // A port scanner or health check: connects, says nothing, stays. (Greeted first and for
    // the whole --timeout, it used to make the client's hello time out, and then the server.)
    let silent = TcpStream::connect((SERVER_ADDR, 19430)).unwrap();
    short_run_passes(server, 19430, 5);
    drop(silent);
}

/// A short run of a client (`--timeout secs`) against `server` on `port`: both sides pass.
fn short_run_passes(server: Server, port: u16, secs: u32) {
    let out = client(&client_args("write-bw", port, secs, &SHORT));
    let (server_ok, server_text, _) = server.finish(Duration::from_secs(30));
    assert!(
        out.status.success(),
        "client:\n{}\nserver:\n{server_text}",
        text(&out)
    );
    assert!(server_ok, "server:\n{server_text}");
}

/// A TCP connection to `port` on this host from the loopback address `from`
/// (127.0.0.0/8 is all local): strangers from many hosts, on one machine.
#[allow(unsafe_code)]
fn connect_from(from: std::net::Ipv4Addr, port: u16) -> Option<TcpStream> {
    use std::os::fd::FromRawFd;
    let sockaddr = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let (src, dst) = (
        sockaddr(from, 0),
        sockaddr(std::net::Ipv4Addr::LOCALHOST, port),
    );
    // SAFETY: a new socket, bound and connected with valid sockaddr_in values of `len`
    // bytes; its descriptor is handed to the TcpStream (which closes it), or closed here.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        if fd < 0 {
            return None;
        }
        let ok = libc::bind(fd, (&src as *const libc::sockaddr_in).cast(), len) == 0
            && libc::connect(fd, (&dst as *const libc::sockaddr_in).cast(), len) == 0;
        if !ok {
            libc::close(fd);
            return None;
        }
        Some(TcpStream::from_raw_fd(fd))
    }
}

/// More silent strangers than the server's 256 greeting slots, 32 from each of ten hosts
/// (each host's cap): a real client still gets in, evicting the oldest, and runs.
#[test]
fn strangers_beyond_every_greeting_slot_do_not_keep_a_client_out() {
    if !rdma_ready("strangers_beyond_every_greeting_slot_do_not_keep_a_client_out") {
        return;
    }
    let server = Server::start(&server_args("write-bw", 19435, 10, &[]));
    std::thread::sleep(Duration::from_millis(500));
    let strangers: Vec<TcpStream> = (2..12u8)
        .flat_map(|host| (0..32).map(move |_| host))
        .filter_map(|host| connect_from(std::net::Ipv4Addr::new(127, 0, 0, host), 19435))
        .collect();
    assert!(strangers.len() > 256, "{} strangers", strangers.len());
    let start = Instant::now();
    short_run_passes(server, 19435, 10);
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    drop(strangers);
}

#[test]
fn a_wrong_token_fails_both_sides_and_the_right_one_runs() {
    if !rdma_ready("a_wrong_token_fails_both_sides_and_the_right_one_runs") {
        return;
    }
    let dir = scratch("token");
    let server_token = dir.join("server.token");
    std::fs::write(&server_token, "server-secret-0123456789abcdef\n").unwrap();
    let server = Server::start(&server_args(
        "write-bw",
        19431,
        4,
        &["--token", server_token.to_str().unwrap()],
    ));
    let wrong = bin()
        .args(client_args("write-bw", 19431, 10, &SHORT))
        .env("RDMABENCH_TOKEN", "client-secret-0123456789abcdef")
        .output()
        .unwrap();
    let (server_ok, server_text, _) = server.finish(Duration::from_secs(20));
    let client_text = text(&wrong);
    assert_eq!(wrong.status.code(), Some(1), "{client_text}");
    assert!(
        client_text.contains(&format!(
            "the server at {SERVER_ADDR}:19431 refused this client"
        )) && client_text.contains("token is not the server's"),
        "{client_text}"
    );
    assert!(!server_ok, "{server_text}");
    assert!(
        server_text.contains("dropped a connection from 10.251.0.")
            && server_text.contains("wrong token"),
        "{server_text}"
    );
    for t in [&client_text, &server_text] {
        assert!(!t.contains("secret-0123"), "a secret was shown: {t}");
    }

    // The same secret, from the environment on one side and a file on the other, runs.
    let server = Server::start(&server_args(
        "write-bw",
        19432,
        10,
        &["--token", server_token.to_str().unwrap()],
    ));
    let right = bin()
        .args(client_args("write-bw", 19432, 10, &SHORT))
        .env("RDMABENCH_TOKEN", "server-secret-0123456789abcdef")
        .output()
        .unwrap();
    let (server_ok, server_text, _) = server.finish(Duration::from_secs(30));
    assert!(
        right.status.success(),
        "client:\n{}\nserver:\n{server_text}",
        text(&right)
    );
    assert!(server_ok, "{server_text}");
    assert!(!server_text.contains("no token"), "{server_text}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_plan_above_the_servers_memory_limit_is_refused_before_allocation() {
    if !rdma_ready("a_plan_above_the_servers_memory_limit_is_refused_before_allocation") {
        return;
    }
    let server = Server::start(&server_args("write-bw", 19433, 10, &["--max-mem", "1M"]));
    let out = client(&client_args(
        "write-bw",
        19433,
        10,
        &["-s", "1M", "-n", "10"],
    ));
    let (server_ok, server_text, _) = server.finish(Duration::from_secs(20));
    let client_text = text(&out);
    // A plan the server's limits refuse cannot run as asked: exit 2, as any refusal.
    assert_eq!(out.status.code(), Some(2), "{client_text}");
    assert!(!server_ok, "{server_text}");
    assert!(
        client_text.contains("the server refused the run:"),
        "{client_text}"
    );
    // The buffer, and the queues beside it.
    let reason = [
        "the client's plan needs 2.1 MiB of host memory (1 QP x 2 MiB, and ",
        " KiB of queues), above this server's --max-mem 1 MiB",
    ];
    for t in [&client_text, &server_text] {
        assert!(reason.iter().all(|r| t.contains(r)), "{t}");
    }

    // Without --max-mem, half of the guest's memory: 1024 QPs x 2 GiB is refused at once, not
    // found out by an allocation that fails.
    let server = Server::start(&server_args("write-bw", 19434, 10, &[]));
    let start = Instant::now();
    let out = client(&client_args(
        "write-bw",
        19434,
        30,
        &["-s", "1G", "-q", "1024", "-n", "1"],
    ));
    let (_, server_text, _) = server.finish(Duration::from_secs(20));
    let client_text = text(&out);
    assert_eq!(out.status.code(), Some(2), "{client_text}");
    assert!(
        client_text
            .contains("the client's plan needs 2048.1 GiB of host memory (1024 QPs x 2 GiB, ")
            && client_text.contains("(half of its memory,"),
        "{client_text}\nserver:\n{server_text}"
    );
    assert!(!server_text.contains("registering"), "{server_text}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
}

#[test]
fn a_trickling_connection_is_dropped_within_its_deadline_and_delays_no_one() {
    if !rdma_ready("a_trickling_connection_is_dropped_within_its_deadline_and_delays_no_one") {
        return;
    }
    let server = Server::start(&server_args("write-bw", 19436, 20, &["--persistent"]));
    // A frame of 100 bytes announced, then one byte every 300 ms: each read gets something,
    // the hello never ends.
    let trickler = std::thread::spawn(|| {
        let mut s = TcpStream::connect((SERVER_ADDR, 19436)).unwrap();
        std::io::Write::write_all(&mut s, &100u32.to_be_bytes()).unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(15) {
            if std::io::Write::write_all(&mut s, b"{").is_err() {
                return Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        None
    });
    let out = client(&client_args("write-bw", 19436, 10, &SHORT));
    // The server stays (persistent), so only its hello deadline can cut the trickler.
    let cut = trickler.join().unwrap();
    let mut server = server;
    server.child.kill().unwrap();
    let (_, server_text, _) = server.finish(Duration::from_secs(30));
    assert!(
        out.status.success(),
        "client:\n{}\nserver:\n{server_text}",
        text(&out)
    );
    // Dropped after its 5 s for the hello (the write that fails comes a beat later).
    let cut = cut.expect("the trickling connection was never dropped");
    assert!(cut < Duration::from_secs(9), "dropped after {cut:?}");
    assert!(
        server_text.contains("dropped a connection from"),
        "{server_text}"
    );
}
