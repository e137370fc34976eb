//! Posting and polling on a real device: one signaled 64-byte RDMA WRITE between two QPs of
//! the same device, posted and its completion polled, per iteration. Needs an ACTIVE RDMA
//! device (`RDMABENCH_BENCH_DEV`, default the first one; the soft-RoCE guest has rxe0);
//! elsewhere it prints that it was skipped and why.

use std::hint::black_box;

use criterion::{Criterion, Throughput};
use verbs::{
    Access, Completion, CompletionQueue, Device, Endpoint, HostBuffer, LinkLayer, MemoryRegion, Op,
    PathConfig, QueuePair, QueuePairBuilder, ReadyToSend, SendRequest,
};

struct Loop {
    qp: QueuePair<ReadyToSend>,
    cq: CompletionQueue,
    mr: MemoryRegion,
    remote: Endpoint,
    // Kept alive: the other end of the connection.
    _peer: QueuePair<ReadyToSend>,
}

fn setup() -> Result<Loop, String> {
    let name = std::env::var("RDMABENCH_BENCH_DEV").ok();
    let device = Device::open(name.as_deref()).map_err(|e| e.to_string())?;
    let port = device.active_port(1).map_err(|e| e.to_string())?;
    let gid = device.resolve_gid(&port, None).map_err(|e| e.to_string())?;
    let pd = device.alloc_pd().map_err(|e| e.to_string())?;
    let mr = MemoryRegion::register_host(
        &pd,
        HostBuffer::new(8192).map_err(|e| e.to_string())?,
        Access::ALL,
    )
    .map_err(|e| e.to_string())?;
    let cq = CompletionQueue::new(&device, 256).map_err(|e| e.to_string())?;
    let a = QueuePairBuilder::new(&pd, &cq)
        .max_send_wr(128)
        .build()
        .map_err(|e| e.to_string())?;
    let b = QueuePairBuilder::new(&pd, &cq)
        .max_send_wr(128)
        .build()
        .map_err(|e| e.to_string())?;
    let end = |qpn: u32, offset: u64| Endpoint {
        qpn,
        psn: 0x100,
        lid: port.lid,
        gid: gid.map(|g| g.gid).unwrap_or_default(),
        mtu: port.active_mtu,
        rkey: mr.rkey(),
        addr: mr.addr() + offset,
        len: 4096,
        rd_atomic: 16,
    };
    let (ea, eb) = (end(a.qpn(), 0), end(b.qpn(), 4096));
    let path = PathConfig {
        sgid_index: if port.link_layer == LinkLayer::Ethernet {
            gid.map(|g| g.index as u8)
        } else {
            None
        },
        mtu: port.active_mtu,
        max_dest_rd_atomic: 16,
        max_rd_atomic: 16,
        ..PathConfig::default()
    };
    let connect = |qp: QueuePair<verbs::Created>, to: &Endpoint| {
        qp.ready_to_receive(to, &path)
            .and_then(|q| q.ready_to_send(0x100, &path))
            .map_err(|e| e.to_string())
    };
    let qp = connect(a, &eb)?;
    let peer = connect(b, &ea)?;
    Ok(Loop {
        qp,
        cq,
        mr,
        remote: eb,
        _peer: peer,
    })
}

fn main() {
    let mut lp = match setup() {
        Ok(lp) => lp,
        Err(why) => {
            println!("device bench skipped: no usable RDMA device ({why}); run it in the soft-RoCE guest");
            return;
        }
    };
    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("device");
    g.throughput(Throughput::Elements(1));
    let mut wcs = [Completion::default(); 16];
    let mut id = 0u64;
    g.bench_function("post_and_poll_one_64B_write", |b| {
        b.iter(|| {
            id += 1;
            let wr = [SendRequest {
                wr_id: id,
                op: Op::Write {
                    remote_addr: lp.remote.addr,
                    rkey: lp.remote.rkey,
                },
                local_offset: 0,
                len: 64,
                signaled: true,
            }];
            if let Err(e) = lp.qp.post_send(&lp.mr, &wr, false) {
                panic!("post failed: {e}");
            }
            loop {
                match lp.cq.poll(&mut wcs) {
                    Ok(0) => continue,
                    Ok(n) => {
                        black_box(&wcs[..n]);
                        break;
                    }
                    Err(e) => panic!("poll failed: {e}"),
                }
            }
        })
    });
    g.finish();
    c.final_summary();
}
