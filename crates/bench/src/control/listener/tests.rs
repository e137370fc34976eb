use super::*;
use std::io::{Read, Write};

fn token(text: &str) -> Token {
    Token::new(text.as_bytes(), "test").unwrap()
}

fn listen(token: Option<Token>, hello_deadline: Duration) -> Listener {
    let greeting = Greeting {
        token,
        timeout: Duration::from_secs(5),
        hello_deadline,
        one_at_a_time: true,
    };
    Listener::bind("127.0.0.1", 0, greeting).unwrap()
}

fn connect(port: u16, token: Option<Token>) -> std::thread::JoinHandle<Result<Channel>> {
    std::thread::spawn(move || {
        Channel::connect("127.0.0.1", port, Duration::from_secs(5), token.as_ref())
    })
}

/// A TCP connection to `to` from the loopback address `from` (127.0.0.0/8 is all local).
#[allow(unsafe_code)]
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    use std::os::fd::FromRawFd;
    let sockaddr = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let SocketAddr::V4(to) = to else {
        panic!("an IPv4 listener")
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a new socket, bound and connected with valid sockaddr_in values; its
    // descriptor is handed to the TcpStream, which owns and closes it.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let src = sockaddr(from, 0);
        let dst = sockaddr(*to.ip(), to.port());
        assert_eq!(
            libc::bind(fd, (&src as *const libc::sockaddr_in).cast(), len),
            0
        );
        assert_eq!(
            libc::connect(fd, (&dst as *const libc::sockaddr_in).cast(), len),
            0
        );
        TcpStream::from_raw_fd(fd)
    }
}

#[test]
fn silent_strangers_filling_every_greeting_slot_do_not_keep_a_client_out() {
    let l = listen(None, Duration::from_secs(20));
    let port = l.port().unwrap();
    let to = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let hosts = MAX_GREETINGS / MAX_GREETINGS_PER_HOST;
    let silent: Vec<TcpStream> = (0..hosts)
        .flat_map(|h| {
            let from = Ipv4Addr::new(127, 0, 1, 2 + h as u8);
            (0..MAX_GREETINGS_PER_HOST).map(move |_| connect_from(from, to))
        })
        .collect();
    // Every slot taken, and a host at its own cap is still refused.
    let start = Instant::now();
    while l.lobby.lock().counted.len() < MAX_GREETINGS {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the slots never filled"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut over = connect_from(Ipv4Addr::new(127, 0, 1, 2), to);
    assert!(closed_within(&mut over, Duration::from_secs(5)));
    // A real client gets in, within its own handshake's time.
    let client = connect(port, None);
    assert!(l.accept_client(Duration::from_secs(5)).is_ok());
    assert!(client.join().unwrap().is_ok());
    assert!(l.lobby.lock().counted.len() <= MAX_GREETINGS);
    drop(silent);
}

#[test]
fn an_ipv6_host_counts_as_its_64() {
    let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
    let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
    let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
    assert_eq!(host_key(a), host_key(b));
    assert_ne!(host_key(a), host_key(other));
    let mapped: IpAddr = "::ffff:10.0.0.7".parse().unwrap();
    assert_eq!(host_key(mapped), IpAddr::from([10, 0, 0, 7]));
}

#[test]
fn a_sweeps_server_takes_only_its_assigned_partner() {
    let l = listen(None, Duration::from_secs(2));
    let port = l.port().unwrap();
    l.serve_only(&[IpAddr::from([10, 251, 0, 3])]);
    let stranger = connect(port, None);
    let err = stranger.join().unwrap().unwrap_err();
    assert_eq!(
        format!("{err:#}"),
        format!(
            "the server at 127.0.0.1:{port} refused this client: this server serves only \
             its assigned partner, at 10.251.0.3"
        )
    );
    l.serve_only(&[IpAddr::from([127, 0, 0, 1])]);
    let partner = connect(port, None);
    assert!(l.accept_client(Duration::from_secs(5)).is_ok());
    assert!(partner.join().unwrap().is_ok());
}

/// A congestion round's receiver serves its senders at once, each server waiting in a
/// thread of its own; back at one seat while those runs go on, a newcomer is told Busy.
#[test]
fn a_congestion_rounds_server_takes_its_partners_at_once() {
    let l = listen(None, Duration::from_secs(2));
    let port = l.port().unwrap();
    let local = IpAddr::from([127, 0, 0, 1]);
    l.serve_only(&[IpAddr::from([10, 251, 0, 3]), local, local]);
    let runs: Vec<Channel> = std::thread::scope(|s| {
        let servers: Vec<_> = (0..3)
            .map(|_| s.spawn(|| l.accept_client(Duration::from_secs(5))))
            .collect();
        let clients: Vec<_> = (0..2).map(|_| connect(port, None)).collect();
        // Three seats, two partners here: both taken, the third waiter gets no one.
        let mut got: Vec<Channel> = Vec::new();
        let mut none = 0;
        for s in servers {
            match s.join().unwrap() {
                Ok(ch) => got.push(ch),
                Err(e) => {
                    assert!(e.is::<NoClient>(), "{e:#}");
                    none += 1;
                }
            }
        }
        let held: Vec<Channel> = clients
            .into_iter()
            .map(|c| c.join().unwrap().unwrap())
            .collect();
        got.extend(held);
        assert_eq!(none, 1);
        got
    });
    assert_eq!(runs.len(), 4, "two runs, each with its client's end");
    // With every seat of a run of one taken, the next client is busy.
    l.serve_only(&[]);
    let err = connect(port, None).join().unwrap().unwrap_err().to_string();
    assert!(err.contains("is busy with another run"), "{err}");
}

/// Whether the server closed `stream` within `within` (reads until EOF or reset).
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => return e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

#[test]
fn a_silent_stranger_delays_no_client() {
    // The hello deadline is the real one: the client must not wait for it.
    let l = listen(None, HELLO_DEADLINE);
    let port = l.port().unwrap();
    let silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    let client = connect(port, None);
    let server = l.accept_client(Duration::from_secs(5));
    assert!(server.is_ok(), "{server:?}");
    assert!(client.join().unwrap().is_ok());
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    drop(silent);
}

#[test]
fn a_trickling_stranger_is_dropped_when_its_hello_deadline_passes() {
    let l = listen(None, Duration::from_millis(400));
    let port = l.port().unwrap();
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let hello = crate::control::frame(br#"{"type":"hello","magic":"rdmabench"}"#);
    let start = Instant::now();
    // A byte every 100 ms: each read gets one, the message never completes in time.
    for b in &hello[..8] {
        if slow.write_all(&[*b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(closed_within(&mut slow, Duration::from_secs(2)));
    assert!(
        start.elapsed() < Duration::from_millis(1500),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_server_keeps_serving_after_any_number_of_strangers() {
    let l = listen(None, Duration::from_millis(100));
    let port = l.port().unwrap();
    for i in 0..40 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let junk: &[u8] = match i % 4 {
            0 => b"",
            1 => b"SSH-2.0-OpenSSH_9.2\r\n",
            2 => &[0xff, 0xff, 0xff, 0xff, b'x'],
            _ => b"\0\0\0\x02{}",
        };
        let _ = s.write_all(junk);
        // Silent ones wait out the hello deadline, the others are dropped at once.
        assert!(
            closed_within(&mut s, Duration::from_secs(2)),
            "stranger {i}"
        );
    }
    let client = connect(port, None);
    assert!(l.accept_client(Duration::from_secs(5)).is_ok());
    assert!(client.join().unwrap().is_ok());
}

#[test]
fn a_second_client_during_a_run_is_told_the_server_is_busy() {
    let l = listen(None, Duration::from_secs(1));
    let port = l.port().unwrap();
    let first = connect(port, None);
    let run = l.accept_client(Duration::from_secs(5)).unwrap();
    let _first = first.join().unwrap().unwrap();
    let start = Instant::now();
    let err = connect(port, None).join().unwrap().unwrap_err().to_string();
    assert!(
        err.contains("the server at 127.0.0.1:") && err.contains("is busy with another run"),
        "{err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    // Once the run's messages are over, the next client is served.
    let mut run = run;
    run.run_over();
    let next = connect(port, None);
    assert!(l.accept_client(Duration::from_secs(5)).is_ok());
    assert!(next.join().unwrap().is_ok());
}

#[test]
fn a_run_waiting_for_another_rail_takes_the_next_connection_instead_of_busy() {
    let l = listen(None, Duration::from_secs(1));
    let port = l.port().unwrap();
    let first = connect(port, None);
    let (mut run, rails) = l.accept_run(Duration::from_secs(5), 1).unwrap();
    let _first = first.join().unwrap().unwrap();
    let second = connect(port, None);
    let rail = rails.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(second.join().unwrap().is_ok());
    // The rail holds no seat of its own; a connection past the run's rails is told Busy.
    assert!(rail.seat.is_none());
    let err = connect(port, None).join().unwrap().unwrap_err().to_string();
    assert!(err.contains("is busy with another run"), "{err}");
    run.run_over();
    let next = connect(port, None);
    assert!(l.accept_client(Duration::from_secs(5)).is_ok());
    assert!(next.join().unwrap().is_ok());
}

#[test]
fn a_client_that_comes_between_runs_waits_for_the_server() {
    let l = listen(None, Duration::from_secs(1));
    let port = l.port().unwrap();
    let client = connect(port, None);
    std::thread::sleep(Duration::from_millis(500));
    assert!(l.accept_client(Duration::from_secs(5)).is_ok());
    assert!(client.join().unwrap().is_ok());
}

/// A client killed while it waited between runs (the soak test kills every 25th) left
/// its greeter in the lobby: it took the seat, and the next client was told Busy.
#[test]
fn a_client_that_left_while_it_waited_does_not_take_the_seat() {
    let l = listen(None, Duration::from_secs(5));
    let addr = SocketAddr::from(([127, 0, 0, 1], l.port().unwrap()));
    let mut left = TcpStream::connect(addr).unwrap();
    let quick = Instant::now() + Duration::from_millis(300);
    assert!(super::super::handshake::greet_server(&mut left, None, quick, addr).is_err());
    drop(left);
    std::thread::sleep(Duration::from_millis(200));
    let next = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        Channel::connect("127.0.0.1", addr.port(), Duration::from_secs(5), None)
    });
    let run = l.accept_client(Duration::from_secs(5)).unwrap();
    let client = next.join().unwrap().unwrap();
    assert_eq!(
        Some(run.peer()),
        client.local(),
        "the live client has the seat"
    );
}

/// A client killed mid-run (the soak test kills every 25th) leaves the server in the run
/// until it next reads from it (it may be registering memory): the next client, which
/// came at once, was told Busy. It now waits for the server to notice.
#[test]
fn a_client_that_comes_after_the_running_one_died_waits_instead_of_busy() {
    let l = listen(None, Duration::from_secs(5));
    let port = l.port().unwrap();
    let first = connect(port, None);
    let run = l.accept_client(Duration::from_secs(5)).unwrap();
    drop(first.join().unwrap().unwrap());
    std::thread::sleep(Duration::from_millis(100));
    let next = connect(port, None);
    // The server has not read from the dead client yet; then it does, and ends the run.
    std::thread::sleep(Duration::from_millis(300));
    drop(run);
    assert!(l.accept_client(Duration::from_secs(5)).is_ok());
    assert!(next.join().unwrap().is_ok());
}

#[test]
fn the_same_token_on_both_sides_is_a_run() {
    let l = listen(Some(token("the cluster's shared secret")), HELLO_DEADLINE);
    let port = l.port().unwrap();
    let client = connect(port, Some(token("the cluster's shared secret")));
    assert!(l.accept_client(Duration::from_secs(5)).is_ok());
    assert!(client.join().unwrap().is_ok());
}

#[test]
fn a_wrong_or_missing_token_fails_the_client_and_the_server_takes_no_one() {
    let l = listen(Some(token("the cluster's shared secret")), HELLO_DEADLINE);
    let port = l.port().unwrap();
    let cases = [
        (
            Some(token("somebody else's long secret")),
            "token is not the server's",
        ),
        (None, "this server requires a token"),
    ];
    for (given, expected) in cases {
        let err = connect(port, given)
            .join()
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("the server at 127.0.0.1:") && err.contains(expected),
            "{err}"
        );
        assert!(!err.contains("secret"), "a secret shown: {err}");
    }
    let err = l.accept_client(Duration::from_millis(300)).unwrap_err();
    assert!(err.is::<NoClient>(), "{err}");
}

#[test]
fn a_client_with_a_token_refuses_a_server_without_one() {
    let l = listen(None, HELLO_DEADLINE);
    let port = l.port().unwrap();
    let err = connect(port, Some(token("the cluster's shared secret")))
        .join()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("this server has no token, but the client gave one"),
        "{err}"
    );
}
