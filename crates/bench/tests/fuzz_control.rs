//! Property tests (proptest) of what a hostile peer can send the control channel:
//!
//! - the frame reader and the message decoder (`control/wire.rs`, `control/messages.rs`):
//!   arbitrary bytes, and arbitrary well-framed JSON shaped like the protocol's messages,
//!   always give a message or an error, never a panic, and never allocate more than the
//!   frame's cap allows (counted by this binary's allocator, per thread);
//! - the server's greeting (`control/handshake.rs`): whatever a peer sends, it is never
//!   admitted by a server with a token unless it proved the token;
//! - the server's check of a client's plan (adoption, then `run/admission.rs`): any plan is
//!   refused naming a limit, or fits every limit, without panicking on its numbers.
//!
//! `cargo test` runs 64 cases per target (a few seconds). A long run:
//! `PROPTEST_CASES=300000 cargo test -p rdmabench --test fuzz_control` (its figures:
//! docs/server-safety.md).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{json, Map, Value};

use rdmabench::control::{
    admit, frame, read_message, MemoryPeer, Message, Nonce, Token, HANDSHAKE_MAX, MAX_MESSAGE,
};
use rdmabench::engine::buffer::Footprint;
use rdmabench::memory::MemMode;
use rdmabench::plan::{AtomicOp, Connection, Mode, PlanRequest, TestKind, TestPlan, Verb};
use rdmabench::run::admission::Admission;

/// The system allocator, counting each thread's live bytes and their peak.
struct Counting;

thread_local! {
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn track(delta: i64) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call goes to the system allocator with the caller's arguments unchanged; the
// counting touches only const-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract, passed on as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            track(layout.size() as i64);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            track(layout.size() as i64);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        track(-(layout.size() as i64));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as `dealloc`, and the caller upholds `realloc`'s contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            track(new_size as i64 - layout.size() as i64);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns its result with the most bytes this thread had allocated at once
/// during it, beyond what it held before.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(before));
    let out = f();
    let peak = PEAK.with(Cell::get) - before;
    (out, peak.max(0) as u64)
}

/// 64 cases per target, unless PROPTEST_CASES says otherwise.
fn config() -> Config {
    let mut config = Config::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 64;
    }
    config.failure_persistence = None;
    config
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

/// Reads one message from `bytes` with the protocol's cap; its result and peak allocation.
fn decode_from(bytes: Vec<u8>, cap: u32) -> (Result<Message, String>, u64) {
    peak_of(|| {
        read_message::<Message>(&mut MemoryPeer::sending(bytes), soon(), cap)
            .map_err(|e| e.to_string())
    })
}

/// The message types and field names of the protocol, and some that are not.
const TYPES: &[&str] = &[
    "hello",
    "auth",
    "welcome",
    "busy",
    "plan",
    "plan_accepted",
    "reject",
    "endpoints",
    "ready",
    "start_size",
    "heartbeat",
    "sends_over",
    "size_done",
    "size_report",
    "finish",
    "Hello",
    "",
];
const FIELDS: &[&str] = &[
    "magic",
    "protocol",
    "tool_version",
    "nonce",
    "proof",
    "reason",
    "qps",
    "bounce",
    "size",
    "rep",
    "result",
    "ops_per_qp",
    "ok",
    "detail",
    "test",
    "sizes",
    "iters",
    "duration",
    "tx_depth",
    "rx_depth",
    "inline",
    "connection",
    "bidirectional",
    "type",
    "qpn",
    "gid",
];

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,40}".prop_map(Value::String),
        prop::sample::select(TYPES).prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(5, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        prop::sample::select(FIELDS).prop_map(String::from),
                        ".{0,8}"
                    ],
                    inner
                ),
                0..8
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A JSON object with a protocol message type and fields, some known, values anything.
fn message_like() -> impl Strategy<Value = Value> {
    (prop::sample::select(TYPES), any_json()).prop_map(|(t, body)| {
        let mut object = match body {
            Value::Object(m) => m,
            other => Map::from_iter([("value".to_string(), other)]),
        };
        object.insert("type".into(), json!(t));
        Value::Object(object)
    })
}

/// A length prefix that lies, or tells the truth, around the caps.
fn prefix() -> impl Strategy<Value = Option<u32>> {
    prop_oneof![
        Just(None),
        Just(Some(0)),
        Just(Some(MAX_MESSAGE)),
        Just(Some(MAX_MESSAGE + 1)),
        Just(Some(u32::MAX)),
        (0u32..5000).prop_map(Some),
        any::<u32>().prop_map(Some),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_give_an_error_or_a_message_within_the_cap(
        prefix in prefix(),
        bytes in prop::collection::vec(any::<u8>(), 0..4096),
    ) {
        let mut input = prefix.map(|n| n.to_be_bytes().to_vec()).unwrap_or_default();
        input.extend_from_slice(&bytes);
        let sent = input.len() as u64;
        let (_, peak) = decode_from(input, MAX_MESSAGE);
        // What a peer announces costs nothing: the body grows as its bytes arrive.
        prop_assert!(peak <= 64 * 1024 + 8 * sent, "{peak} bytes for {sent} sent");
    }

    #[test]
    fn well_framed_json_gives_an_error_or_a_message(value in message_like()) {
        let body = serde_json::to_vec(&value).unwrap();
        let (got, peak) = decode_from(frame(&body), MAX_MESSAGE);
        prop_assert!(peak <= 64 * 1024 + 16 * body.len() as u64, "{peak} for {}", body.len());
        if let Ok(msg) = got {
            // What decoded encodes and decodes to the same kind of message.
            let mut again = Vec::new();
            rdmabench::control::write_message(&mut again, &msg, soon()).unwrap();
            let (back, _) = decode_from(again, MAX_MESSAGE);
            prop_assert_eq!(back.map(|m| m.name()), Ok(msg.name()));
        }
    }

    #[test]
    fn a_hostile_peer_is_never_admitted_without_the_token(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        hello_first in any::<bool>(),
        proof in prop::option::of(".{0,64}"),
        trailing in prop::option::of(message_like()),
    ) {
        let token = Token::new(b"the cluster's shared secret", "test").unwrap();
        let mut input = Vec::new();
        if hello_first {
            let hello = Message::hello(Nonce::new().unwrap().to_base64());
            rdmabench::control::write_message(&mut input, &hello, soon()).unwrap();
            rdmabench::control::write_message(&mut input, &Message::Auth { proof }, soon()).unwrap();
        }
        if let Some(v) = trailing {
            input.extend(frame(&serde_json::to_vec(&v).unwrap()));
        }
        input.extend_from_slice(&bytes);
        let mut peer = MemoryPeer::sending(input);
        let (admitted, peak) = peak_of(|| admit(&mut peer, Some(&token), soon()));
        prop_assert!(admitted.is_err());
        // A stranger's messages are capped far below the protocol's.
        prop_assert!(peak <= 64 * 1024 + 16 * u64::from(HANDSHAKE_MAX), "{peak}");
    }

    #[test]
    fn any_plan_is_refused_naming_a_limit_or_fits_them_all(
        plan in any_plan(),
        max_mem in prop::option::of(any::<u64>()),
        max_qps in 1u32..=1024,
        max_duration in 1.0f64..1e6,
        host_total in prop::option::of(any::<u64>()),
        mem in prop::sample::select(vec!["host", "cuda:0", "cuda-staged:0", "rocm-staged:0"]),
    ) {
        let admission = Admission { max_mem, max_qps, max_duration };
        let Ok(plan) = TestPlan::adopt(plan.clone(), plan.test, &PlanRequest::default()) else {
            return Ok(());
        };
        let mem = MemMode::parse(mem).unwrap();
        let Ok(need) = Footprint::new(&plan, &mem, accel::StagingConfig::default()) else {
            return Ok(());
        };
        let caps = admission.caps(host_total, Some(80 << 30));
        match admission.check(&plan, &need, &caps) {
            Err(refused) => prop_assert!(
                refused.0.contains("--max-") || refused.0.contains("limit of"),
                "{refused}"
            ),
            Ok(()) => {
                prop_assert!(plan.qps <= max_qps);
                if let Some(cap) = &caps.host {
                    prop_assert!(need.host_bytes() <= cap.bytes);
                }
                if let Some(cap) = &caps.gpu {
                    prop_assert!(need.gpu_bytes() <= cap.bytes);
                }
                let timed = plan.duration.unwrap_or(0.0)
                    * plan.sizes.len() as f64
                    * f64::from(plan.repeat);
                prop_assert!(timed <= max_duration);
            }
        }
    }
}

/// Mostly a sensible value, sometimes any.
fn mostly<T: std::fmt::Debug + Clone + 'static>(
    sane: impl Strategy<Value = T> + 'static,
    wild: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<T> {
    prop_oneof![9 => sane, 1 => wild].boxed()
}

/// A plan with any numbers, as a hostile client could send it: mostly sensible values (so
/// that many pass the plan's own rules and reach the limits), sometimes anything.
fn any_plan() -> impl Strategy<Value = TestPlan> {
    let verb = prop::sample::select(vec![Verb::Write, Verb::Read, Verb::Send, Verb::Atomic]);
    let mode = prop::sample::select(vec![Mode::Bw, Mode::Lat]);
    let size = mostly(prop_oneof![1u64..=65_536, 1u64..=(1 << 31)], any::<u64>());
    let sizes = mostly(
        prop::collection::vec(size.clone(), 1..4),
        prop::collection::vec(size, 0..30),
    );
    let count = |hi: u32| mostly(1u32..=hi, any::<u32>());
    let duration = prop::option::of(mostly(0.001f64..1e5, any::<f64>()));
    let connection = prop_oneof![
        3 => Just(Connection::Rc),
        1 => prop::sample::select(vec![Connection::Uc, Connection::Ud]),
    ];
    let first = (
        verb,
        mode,
        sizes,
        mostly(1u64..1_000_000, any::<u64>()),
        duration,
        prop_oneof![3 => Just(1u32), 1 => count(1024)],
        count(1024),
        count(1024),
    );
    let second = (
        prop_oneof![3 => Just(0u32), 1 => count(256)],
        prop_oneof![3 => Just(1u32), 1 => count(4)],
        count(16),
        connection,
        prop_oneof![3 => Just(false), 1 => Just(true)],
        prop_oneof![3 => Just(None), 1 => prop::option::of(prop_oneof![Just(1024u32), any::<u32>()])],
        prop_oneof![3 => Just(None), 1 => prop::option::of(count(16))],
        (
            any::<bool>(),
            any::<bool>(),
            count(10),
            prop::option::of(any::<u8>()),
            prop::option::of(any::<u8>()),
            prop::option::of(any::<u8>()),
        ),
    );
    (first, second).prop_map(
        |(
            (verb, mode, sizes, iters, duration, qps, tx_depth, rx_depth),
            (
                inline,
                post_list,
                cq_mod,
                connection,
                bidirectional,
                mtu,
                outs,
                (cas, validate, repeat, qp_timeout, tclass, sl),
            ),
        )| TestPlan {
            test: TestKind::new(verb, mode),
            sizes,
            iters,
            duration,
            qps,
            tx_depth,
            rx_depth,
            inline,
            post_list,
            cq_mod,
            connection,
            bidirectional,
            path_mtu: mtu,
            outs,
            qp_timeout,
            tclass,
            sl,
            atomic: if cas {
                AtomicOp::CompareSwap
            } else {
                AtomicOp::FetchAdd
            },
            validate,
            repeat,
            // Every other parameter as an empty request resolves it, so that a new one
            // needs nothing here.
            ..default_plan()
        },
    )
}

/// write-bw's plan with every default.
fn default_plan() -> TestPlan {
    PlanRequest::default()
        .resolve(TestKind::new(Verb::Write, Mode::Bw))
        .expect("the defaults are a valid plan")
}

/// A frame is refused above its cap before anything is allocated, and read as its bytes come;
/// decoding a full one costs more than its size, because serde buffers an internally tagged
/// message before it reads the tag: a megabyte of small numbers takes about 17 MiB. Only a
/// client that proved the token can send one; a stranger's messages are capped at 4 KiB.
#[test]
fn the_largest_messages_cost_a_bounded_multiple_of_the_cap() {
    let filler = MAX_MESSAGE as usize - 64;
    let reason = json!({"type": "reject", "reason": "x".repeat(filler)});
    let counts = format!(
        r#"{{"type":"plan_accepted","ops_per_qp":[{}0]}}"#,
        "1,".repeat(filler / 2)
    );
    for body in [serde_json::to_vec(&reason).unwrap(), counts.into_bytes()] {
        assert!(body.len() <= MAX_MESSAGE as usize, "{}", body.len());
        let (got, peak) = decode_from(frame(&body), MAX_MESSAGE);
        assert!(got.is_ok(), "{got:?}");
        eprintln!("a {}-byte message: {peak} bytes at most", body.len());
        assert!(peak <= 20 * u64::from(MAX_MESSAGE), "{peak}");
    }
    let (got, peak) = decode_from(frame(&vec![b' '; MAX_MESSAGE as usize + 1]), MAX_MESSAGE);
    assert!(got.unwrap_err().contains("exceeds the 1048576-byte limit"));
    assert!(peak < 64 * 1024, "{peak}");
}

/// A client's and a server's frame sealing of one connection with a token.
fn sealed_pair() -> (rdmabench::control::Framing, rdmabench::control::Framing) {
    use rdmabench::control::{Framing, Prover};
    let token = Token::new(b"the cluster's shared secret", "test").unwrap();
    let (s, c) = (Nonce::new().unwrap(), Nonce::new().unwrap());
    let addr = std::net::SocketAddr::from(([10, 0, 0, 2], 18515));
    (
        Framing::sealed(&token.frame_keys(Prover::Client, &s, &c), addr),
        Framing::sealed(&token.frame_keys(Prover::Server, &s, &c), addr),
    )
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_sealed_frame_with_any_bit_flipped_is_refused(
        size in any::<u64>(),
        rep in any::<u32>(),
        at in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let (client, server) = sealed_pair();
        let mut bytes = Vec::new();
        client.write(&mut bytes, &Message::StartSize { size, rep }, soon()).unwrap();
        let i = at.index(bytes.len());
        bytes[i] ^= 1 << bit;
        let got = server.read::<Message>(&mut MemoryPeer::sending(bytes), soon(), MAX_MESSAGE);
        prop_assert!(got.is_err(), "byte {i} bit {bit} altered: {got:?}");
    }

    #[test]
    fn sealed_frames_are_taken_only_in_the_order_they_were_sent(
        order in Just((0..6usize).collect::<Vec<_>>()).prop_shuffle(),
        replay in prop::option::of((0..6usize, 0..7usize)),
    ) {
        let (client, server) = sealed_pair();
        let frames: Vec<Vec<u8>> = (0..6u32)
            .map(|rep| {
                let mut f = Vec::new();
                client.write(&mut f, &Message::StartSize { size: 4096, rep }, soon()).unwrap();
                f
            })
            .collect();
        let mut sent: Vec<usize> = order;
        if let Some((which, at)) = replay {
            sent.insert(at.min(sent.len()), which);
        }
        let mut input = MemoryPeer::sending(sent.iter().flat_map(|&i| frames[i].clone()).collect());
        let mut taken = Vec::new();
        while let Ok(msg) = server.read::<Message>(&mut input, soon(), MAX_MESSAGE) {
            let Message::StartSize { rep, .. } = msg else {
                panic!("{msg:?}");
            };
            taken.push(rep as usize);
        }
        // What is taken is the start of the order sent, and nothing after the first frame
        // out of place.
        let in_order = sent.iter().enumerate().take_while(|&(i, &f)| i == f).count();
        prop_assert_eq!(taken, (0..in_order).collect::<Vec<_>>());
    }
}

/// The 40-byte header of a V2 HdrHistogram (the form a latency size's `hdr` carries, both
/// ways: the client's figures to the server, the server's report to the client) with the
/// payload length it announces and the range rdmabench records (1 ns .. 60 s, 3 digits).
fn histogram_header(announced: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend(0x1c84_9313u32.to_be_bytes()); // V2, uncompressed
    bytes.extend(announced.to_be_bytes());
    bytes.extend(0u32.to_be_bytes()); // normalizing offset
    bytes.extend(3u32.to_be_bytes()); // significant digits
    bytes.extend(1u64.to_be_bytes()); // lowest
    bytes.extend(rdmabench::histogram::MAX_NS.to_be_bytes()); // highest
    bytes.extend(1.0f64.to_be_bytes()); // integer-to-double ratio
    bytes
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A histogram that announces more payload than it carries is refused before anything of
/// the announced length is allocated: 40 bytes once cost 4 GiB.
#[test]
fn a_histogram_that_lies_about_its_length_allocates_nothing_for_it() {
    for announced in [1u32 << 28, u32::MAX] {
        let text = base64_of(&histogram_header(announced));
        let (got, peak) = peak_of(|| rdmabench::histogram::LatencyRecorder::from_base64(&text));
        let e = format!("{:#}", got.unwrap_err());
        assert!(peak < 2 << 20, "{peak} bytes for a 40-byte histogram ({e})");
        assert!(
            e.contains(&format!("{announced} bytes")) && e.contains("carries 0"),
            "{e}"
        );
    }
}

proptest! {
    #![proptest_config(config())]

    /// Any header (cookie, lengths, range, digits) and any payload: a histogram or an error,
    /// never more memory than rdmabench's own histogram takes, whatever the header says.
    #[test]
    fn any_histogram_decodes_or_is_refused_within_a_bounded_allocation(
        cookie in prop_oneof![4 => Just(0x1c84_9313u32), 1 => Just(0x1c84_9314), 1 => any::<u32>()],
        announced in prop_oneof![
            4 => Just(None),
            1 => Just(Some(u32::MAX)),
            1 => any::<u32>().prop_map(Some)
        ],
        digits in prop_oneof![4 => Just(3u32), 1 => 0u32..=6, 1 => any::<u32>()],
        low in prop_oneof![4 => Just(1u64), 1 => any::<u64>()],
        high in prop_oneof![
            4 => Just(rdmabench::histogram::MAX_NS),
            1 => Just(u64::MAX),
            1 => any::<u64>()
        ],
        payload in prop::collection::vec(
            prop_oneof![3 => any::<u8>(), 1 => Just(0xffu8), 1 => Just(0u8)],
            0..512
        ),
    ) {
        let mut bytes = histogram_header(0);
        bytes[0..4].copy_from_slice(&cookie.to_be_bytes());
        let len = announced.unwrap_or(payload.len() as u32);
        bytes[4..8].copy_from_slice(&len.to_be_bytes());
        bytes[12..16].copy_from_slice(&digits.to_be_bytes());
        bytes[16..24].copy_from_slice(&low.to_be_bytes());
        bytes[24..32].copy_from_slice(&high.to_be_bytes());
        bytes.extend_from_slice(&payload);
        let text = base64_of(&bytes);
        let (_, peak) = peak_of(|| rdmabench::histogram::LatencyRecorder::from_base64(&text));
        prop_assert!(peak < 2 << 20, "{peak} bytes for a {}-byte histogram", bytes.len());
    }
}

/// A client that sends only heartbeats (sealed with the token, every 200 ms) to a server
/// waiting for its next step with `--timeout 1`: the heartbeats do not extend the wait, so
/// the server drops it within the timeout instead of keeping its seat for it, and the next
/// client is served right after.
#[test]
fn a_client_that_only_heartbeats_is_dropped_within_the_timeout() {
    use rdmabench::control::{Channel, Greeting, Listener};
    let token = Token::new(b"the cluster's shared secret", "test").unwrap();
    let timeout = Duration::from_secs(1);
    let l = Listener::bind("127.0.0.1", 0, Greeting::new(Some(token.clone()), timeout)).unwrap();
    let port = l.port().unwrap();
    let token_for_next = token.clone();
    let beats = std::thread::spawn(move || {
        let mut ch =
            Channel::connect("127.0.0.1", port, Duration::from_secs(5), Some(&token)).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until && ch.send(&Message::Heartbeat).is_ok() {
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let mut server = l.accept_client(Duration::from_secs(5)).unwrap();
    let start = Instant::now();
    let err = server.expect("StartSize").unwrap_err();
    let took = start.elapsed();
    assert!(took < Duration::from_millis(1500), "{took:?}");
    assert!(err.to_string().contains("timed out after 1 s"), "{err}");
    drop(server);
    // The seat is free again: a real client is taken at once, while the dropped one may
    // still be heartbeating into its closed connection.
    let real = std::thread::spawn(move || {
        let t = Duration::from_secs(5);
        Channel::connect("127.0.0.1", port, t, Some(&token_for_next)).map(|_| ())
    });
    let next = l.accept_client(Duration::from_secs(5));
    assert!(next.is_ok(), "{:?}", next.err());
    assert!(real.join().unwrap().is_ok());
    beats.join().unwrap();
}
