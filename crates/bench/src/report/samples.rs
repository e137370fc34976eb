//! Synthetic runs for tests: records as a live run would write them, built without a device.
//! Ceilings, PCIe facts, warnings and notes come from the sysfs fixture trees (through the
//! same `run::limits` a live run uses); everything a live run would take from this machine
//! or this build (tool version, host, start time) is fixed, so that snapshots of what is
//! rendered from them never change by themselves.

use crate::histogram::LatencyRecorder;
use crate::run::figures::aggregate;
use crate::run::limits::{limits_from, RunLimits};
use crate::sysroot::fixture;

use super::*;

/// A run as its sides saw it: every repetition of every size (in the order of the plan's
/// sizes, as the live table prints them) and the record they were folded into.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    /// The record; `results` are `reps` folded as a live run folds them.
    pub record: RunRecord,
    /// Per size, each repetition's figures.
    pub reps: Vec<Vec<SizeResult>>,
}

fn sample(mut record: RunRecord, reps: Vec<Vec<SizeResult>>) -> Sample {
    record.results = reps
        .iter()
        .map(|r| aggregate(r.clone()).expect("repetitions fold"))
        .collect();
    Sample { record, reps }
}

/// A record of `device` on a fixture's `limits`, with `params`; the figures come later.
fn record(device: DeviceRecord, limits: RunLimits, params: ParamsRecord) -> RunRecord {
    RunRecord {
        schema: SCHEMA.to_string(),
        tool: ToolRecord {
            version: "0.1.0".to_string(),
            git: Some("0123456789ab".to_string()),
        },
        started_at: "2026-11-30T03:05:35Z".to_string(),
        role: Some("client".to_string()),
        host: HostRecord {
            hostname: Some("node1".to_string()),
            kernel: Some("6.1.0-40-amd64".to_string()),
        },
        device,
        pcie: limits.pcie,
        params,
        ceilings: limits.ceilings,
        counters: Some(
            [
                ("counters/port_rcv_data".to_string(), 1_250),
                ("counters/port_xmit_data".to_string(), 81_937_500),
                ("counters/port_xmit_packets".to_string(), 80_000),
            ]
            .into(),
        ),
        gpu: None,
        warnings: limits.warnings,
        notes: limits.notes,
        status: RunStatus::Complete,
        error: None,
        results: Vec::new(),
        rails: Vec::new(),
    }
}

/// An InfiniBand ConnectX-7 port (mlx5_0 of a fixture), GID 0.
fn mlx5(fw: &str, speed: &str) -> DeviceRecord {
    DeviceRecord {
        name: "mlx5_0".to_string(),
        fw_ver: fw.to_string(),
        vendor_id: 0x02c9,
        part_id: 4129,
        port: 1,
        link_layer: "InfiniBand".to_string(),
        active_mtu: 4096,
        active_speed: Some(speed.to_string()),
        gid_index: Some(0),
        gid_kind: Some("IB".to_string()),
        gid: Some("fe80:0000:0000:0000:a088:c203:0001:0001".to_string()),
    }
}

/// A write-bw record with every optional parameter present (as no one run has them), so that
/// a test can see and change each.
pub(crate) fn every_param_present() -> RunRecord {
    let mut r = write_bw().record;
    let p = &mut r.params;
    p.rx_depth = Some(512);
    p.outs = Some(16);
    p.atomic = Some("FETCH_AND_ADD".into());
    p.duration = Some(2.0);
    p.warmup = Some(16);
    p.latency = Some("one_way".into());
    p.clock = Some("tsc".into());
    p.clock_hz = Some(2.4e9);
    p.tclass = Some(106);
    p.rate_limit = Some(12.5);
    p.interval = Some(0.5);
    // Any other absent one: a value of its type, as the record's schema says it.
    let schema = serde_json::to_value(schemars::schema_for!(ParamsRecord)).unwrap();
    let mut params = serde_json::to_value(&r.params).unwrap();
    for (key, field) in schema["properties"].as_object().unwrap() {
        if params.get(key).is_none_or(serde_json::Value::is_null) {
            let types = field["type"].as_array().cloned().unwrap_or_default();
            params[key] = match types.first().and_then(|t| t.as_str()) {
                Some("integer") => 1.into(),
                Some("number") => 1.5.into(),
                Some("boolean") => true.into(),
                Some("string") => "other".into(),
                other => panic!("params.{key} is of type {other:?}: give it a value here"),
            };
        }
    }
    r.params = serde_json::from_value(params).unwrap();
    r
}

/// write-bw's parameters with their defaults, on host memory, CPU 3 of node 0.
fn bw_params(test: &str) -> ParamsRecord {
    ParamsRecord {
        test: test.to_string(),
        mem: "host".to_string(),
        connection: "RC".to_string(),
        qps: 1,
        tx_depth: Some(128),
        rx_depth: None,
        outs: None,
        atomic: None,
        inline: 0,
        post_list: Some(1),
        cq_mod: Some(64),
        path_mtu: Some(4096),
        qp_timeout: Some(14),
        validate: false,
        iters: Some(5000),
        duration: None,
        warmup: None,
        bidirectional: false,
        latency: None,
        repeat: 1,
        relaxed_ordering: true,
        clock: None,
        clock_hz: None,
        cpus: Some("3".to_string()),
        numa_node: Some(0),
        placement: Some("of the NIC's node 0 0-15".to_string()),
        threads: 1,
        ..ParamsRecord::default()
    }
}

/// A bandwidth size's figures: `iterations` operations in `seconds`, against `limit`.
fn bw(size: u64, iterations: u64, seconds: f64, limit: Option<f64>) -> SizeResult {
    let mut r = SizeResult::from_window(size, iterations, seconds)
        .expect("a positive window")
        .with_ceiling(limit);
    r.in_flight_max = Some(128);
    r
}

/// `write-bw -a`-like: three sizes on a 400 Gb/s NIC behind Gen5 x16 (dgx-h100), wire-bound.
pub(crate) fn write_bw() -> Sample {
    let limits = limits_from(&fixture("dgx-h100"), "mlx5_0", 1, 4096);
    let limit = limits.ceilings.limit_gbps;
    let record = record(
        mlx5("28.39.1002", "400 Gb/sec (4X NDR)"),
        limits,
        bw_params("write-bw"),
    );
    let reps = vec![
        vec![bw(2, 5000, 0.000_937_5, limit)],
        vec![bw(65536, 5000, 0.007_120, limit)],
        vec![bw(8_388_608, 5000, 0.862_5, limit)],
    ];
    sample(record, reps)
}

/// `send-bw -b`: both sides send on a NIC whose link trained at Gen3 x8 (downtrained).
pub(crate) fn send_bw_bidirectional() -> Sample {
    let limits = limits_from(&fixture("downtrained"), "mlx5_0", 1, 4096);
    let limit = limits.ceilings.limit_gbps;
    let mut params = bw_params("send-bw");
    params.rx_depth = Some(512);
    params.bidirectional = true;
    let record = record(mlx5("20.38.1002", "200 Gb/sec (4X HDR)"), limits, params);
    let both = |size: u64, there: f64, back: f64| {
        let c = bw(size, 5000, there, limit);
        let s = bw(size, 5000, back, limit);
        let mut sum = bw(size, 10_000, there.max(back), None);
        sum.bw_gbps = c.bw_gbps + s.bw_gbps;
        sum.gbits = c.gbits + s.gbits;
        sum.msg_rate_mpps = c.msg_rate_mpps + s.msg_rate_mpps;
        sum = sum.with_ceiling(limit);
        let side = |r: &SizeResult| DirectionFigures {
            iterations: r.iterations,
            seconds: r.seconds,
            bw_gbps: r.bw_gbps,
            msg_rate_mpps: r.msg_rate_mpps,
        };
        sum.directions = Some(Directions {
            client_to_server: side(&c),
            server_to_client: side(&s),
        });
        sum
    };
    let reps = vec![
        vec![both(4096, 0.006_25, 0.006_5)],
        vec![both(65536, 0.097_8, 0.098_5)],
    ];
    sample(record, reps)
}

/// `read-bw -D 2 --repeat 3 -o 16`: three repetitions of two sizes, timed.
pub(crate) fn read_bw_repeated() -> Sample {
    let limits = limits_from(&fixture("dgx-h100"), "mlx5_0", 1, 4096);
    let limit = limits.ceilings.limit_gbps;
    let mut params = bw_params("read-bw");
    params.outs = Some(16);
    params.iters = None;
    params.duration = Some(2.0);
    params.repeat = 3;
    let record = record(mlx5("28.39.1002", "400 Gb/sec (4X NDR)"), limits, params);
    let reps = vec![
        vec![
            bw(4096, 18_000_000, 1.6, limit),
            bw(4096, 17_400_000, 1.6, limit),
            bw(4096, 18_300_000, 1.6, limit),
        ],
        vec![
            bw(65536, 1_180_000, 1.6, limit),
            bw(65536, 1_160_000, 1.6, limit),
            bw(65536, 1_175_000, 1.6, limit),
        ],
    ];
    sample(record, reps)
}

/// A latency size's figures from its samples (nanoseconds), as a live loop reports them.
fn lat(size: u64, samples_ns: &[u64]) -> SizeResult {
    let mut h = LatencyRecorder::new().expect("a histogram");
    for &ns in samples_ns {
        h.record(ns);
    }
    let seconds = samples_ns.iter().sum::<u64>() as f64 * 2.0 / 1e9;
    let mut r =
        SizeResult::from_window(size, samples_ns.len() as u64, seconds).expect("a positive window");
    r.lat_us = Some(h.stats().expect("samples"));
    r.hdr = Some(h.to_base64().expect("a histogram serializes"));
    r
}

/// `write-lat -s 2` and 64 on soft-RoCE (rxe0 of the rxe-vm fixture: virtual, so a note
/// says why there is no PCIe ceiling), timed with the TSC.
pub(crate) fn write_lat() -> Sample {
    let limits = limits_from(&fixture("rxe-vm"), "rxe0", 1, 1024);
    let device = DeviceRecord {
        name: "rxe0".to_string(),
        fw_ver: "0.0.0".to_string(),
        vendor_id: 0x00ff_ffff,
        part_id: 0,
        port: 1,
        link_layer: "Ethernet".to_string(),
        active_mtu: 1024,
        active_speed: Some("2.5 Gb/sec (1X SDR)".to_string()),
        gid_index: Some(1),
        gid_kind: Some("RoCE v2".to_string()),
        gid: Some("0000:0000:0000:0000:0000:ffff:0afb:0001".to_string()),
    };
    let mut params = bw_params("write-lat");
    params.tx_depth = None;
    params.post_list = None;
    params.cq_mod = None;
    params.inline = 220;
    params.path_mtu = Some(1024);
    params.qp_timeout = Some(18);
    params.iters = Some(1000);
    params.warmup = Some(16);
    params.latency = Some("one_way".to_string());
    params.clock = Some("tsc".to_string());
    params.clock_hz = Some(2_445_410_000.0);
    params.cpus = Some("0".to_string());
    params.numa_node = None;
    params.placement = Some("NIC's NUMA node unknown; one of the allowed CPUs 0-1".to_string());
    let record = record(device, limits, params);
    let spread = |base: u64| -> Vec<u64> { (0..1000).map(|i| base + (i * 37) % 900).collect() };
    let reps = vec![
        vec![lat(2, &spread(13_600))],
        vec![lat(64, &spread(14_100))],
    ];
    sample(record, reps)
}

/// `write-bw --mem cuda-staged:0` on dgx-h100: the GPU under the NIC's switch, staged.
pub(crate) fn write_bw_staged() -> Sample {
    let mut limits = limits_from(&fixture("dgx-h100"), "mlx5_0", 1, 4096);
    crate::run::limits::add_gpu(&fixture("dgx-h100"), "mlx5_0", "0000:19:00.0", &mut limits);
    let limit = limits.ceilings.limit_gbps;
    let mut params = bw_params("write-bw");
    params.mem = "cuda-staged:0".to_string();
    let mut record = record(mlx5("28.39.1002", "400 Gb/sec (4X NDR)"), limits, params);
    record.gpu = Some(GpuRecord {
        name: "NVIDIA H100 80GB HBM3".to_string(),
        bus_id: "0000:19:00.0".to_string(),
        gdr: false,
        chosen: None,
        staging: Some(StagingRecord {
            chunk: 1 << 20,
            depth: 4,
        }),
    });
    sample(record, vec![vec![bw(1 << 20, 5000, 0.24, limit)]])
}
