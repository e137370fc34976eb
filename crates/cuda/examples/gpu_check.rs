//! GPU check for `rdmabench-cuda`, for a machine with an NVIDIA GPU (no RDMA device needed). Run by
//! `scripts/gpu-check.sh`, or `cargo run --release -p rdmabench-cuda --example gpu_check [-- DEVICE]` where
//! DEVICE is an index (default 0) or a PCI bus id. A few seconds on an H200.
//!
//! 1. driver and devices: version, every GPU's name, bus id, memory, dma-buf and GPUDirect RDMA attributes;
//! 2. allocation: 64 KiB rounding and alignment, the `--validate` pattern written and read back, and a planted
//!    corruption found at the right byte;
//! 3. dma-buf: the whole buffer and an unaligned sub-range exported; each fd checked to be a dma-buf
//!    (`exp_name` in `/proc/self/fdinfo/<fd>`), offset/length/iova arithmetic checked; where the driver says it
//!    cannot export (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` 0, as NVIDIA's proprietary kernel modules do) the
//!    attribute and every export SKIP, saying why: peer memory and the staged path do not need it;
//! 4. pinned host <-> device copy bandwidth, 4 KiB .. 256 MiB, both directions (in practice the GPU's PCIe link
//!    ceiling; nvbandwidth reports the same), judged against what the GPU's PCIe link carries at the speed and
//!    width both its ends can do (sysfs, the GPU's and the port's above it: `topo`'s one rule), the link read
//!    while copies run (a GPU lowers its link speed at idle): below [`LINK_SHARE`] of it fails, naming the link,
//!    and so does a link trained below what both ends can do;
//! 5. the staged pipeline's copy half through K pinned bounce buffers with events, driven by the staging
//!    scheduler: first for correctness (bytes through the real copies, partial last chunk), then at full speed
//!    for a few chunk sizes and depths, in GB/s and as a share of the plain copy bandwidth;
//! 6. threads: a buffer, pinned memory, a stream and an event made on one thread, used (a copy, the pattern
//!    checked) on a second, released on a third, which then allocates again;
//! 7. small and odd sizes (1 B .. 2 MiB + 1): each allocated (padded or not, as the driver's address asks),
//!    pattern-checked and exported as a dma-buf.
//!
//! Section 1 also prints the GPUDirect RDMA write-ordering and flush-writes attributes, and flushes a NIC's writes
//! as rdmabench does before its `--validate` read-back where the ordering is NONE; section 2 reads
//! `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS` back. `scripts/gpu-check.sh` adds rdmabench loopback runs where an RDMA
//! device exists.
//!
//! Usage: `gpu_check [DEVICE] [--sysfs-root DIR]`; `--sysfs-root` reads the PCIe link from a copy of another
//! machine's `/sys` under DIR (as `rdmabench topo` does), for the tests.
//!
//! Exit status: 0 when every check passed; 1 when one failed or could not run (the summary says which); 2 bad
//! usage. Without a driver it prints one line, "gpu_check: no CUDA driver: libcuda.so.1 not found; ...", and
//! exits 1.

use std::process::ExitCode;
use std::time::Instant;

use cuda::staging::{RecvPipeline, SendPipeline, StagingConfig, StagingPlan};
use cuda::{
    CudaError, Device, DeviceBuffer, DeviceSelector, Event, NicWritesFlush, PinnedBuffer, Stream,
};
use topo::{PciFunction, PciLink, Pcie, Sysfs, Training};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// The share of its PCIe link's payload ceiling (at the speed and width both its ends can do) a GPU's pinned
/// copies must reach. Healthy GPUs copy at 85-95% of it (an H100 on Gen5 x16, an A100 on Gen4 x16); a link trained
/// down one generation or to half its lanes gives at most 50%.
const LINK_SHARE: f64 = 0.6;

struct Report {
    failures: Vec<String>,
    skipped: usize,
}

impl Report {
    /// A check that cannot run here: SKIP with why, neither a pass nor a failure.
    fn skip(&mut self, name: &str, why: &str) {
        println!("  [SKIP] {name}: {why}");
        self.skipped += 1;
    }

    fn check(&mut self, name: &str, ok: bool, detail: &str) {
        println!(
            "  [{}] {name}{}{detail}",
            if ok { "PASS" } else { "FAIL" },
            if detail.is_empty() { "" } else { ": " }
        );
        if !ok {
            self.failures.push(format!("{name}: {detail}"));
        }
    }
}

fn gbps(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / secs / 1e9
}

fn human(bytes: usize) -> String {
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} B")
    }
}

/// What the command line asked for.
struct Args {
    selector: DeviceSelector,
    sysfs: Sysfs,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        selector: DeviceSelector::Index(0),
        sysfs: Sysfs::system(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        if arg == "--sysfs-root" {
            let dir = it
                .next()
                .ok_or("--sysfs-root needs a directory (one that holds sys/)")?;
            if !std::path::Path::new(&dir).join("sys").is_dir() {
                return Err(format!("--sysfs-root {dir}: no sys/ directory there"));
            }
            args.sysfs = Sysfs::new(dir);
        } else {
            args.selector = arg.parse::<DeviceSelector>().map_err(|e| e.to_string())?;
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("gpu_check: {e}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(report) if report.failures.is_empty() && report.skipped == 0 => {
            println!("\nRESULT: all checks passed");
            ExitCode::SUCCESS
        }
        Ok(report) if report.failures.is_empty() => {
            println!(
                "\nRESULT: every check that could run passed ({} skipped, each saying why)",
                report.skipped
            );
            ExitCode::SUCCESS
        }
        Ok(report) => {
            println!("\nRESULT: {} check(s) failed:", report.failures.len());
            for f in &report.failures {
                println!("  - {f}");
            }
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("gpu_check: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<Report, CudaError> {
    let Args { selector, sysfs } = args;
    // Probe before printing anything: without a driver the whole output is the one error line.
    let driver = cuda::probe()?;
    let mut report = Report {
        failures: Vec::new(),
        skipped: 0,
    };

    println!("== 1. driver and devices");
    print_gpus(&driver)?;
    let (gpu, bus_id) = open_gpu(&selector, &sysfs)?;
    let exports = check_attributes(&mut report, &gpu)?;

    println!("\n== 2. allocation and the --validate pattern");
    let buf = check_allocation(&mut report, &gpu)?;

    println!("\n== 3. dma-buf export");
    check_dmabuf(&mut report, &buf, 0, buf.len(), exports);
    check_dmabuf(&mut report, &buf, 12_345, MIB, exports);
    check_dmabuf(&mut report, &buf, 5 * MIB, 3 * 4096, exports);

    println!("\n== 4. pinned host <-> device copy bandwidth (one stream, GB/s = 1e9 B/s)");
    let max = 256 * MIB;
    let dev = DeviceBuffer::new(&gpu, max)?;
    let host = PinnedBuffer::new(&gpu, max)?;
    let stream = Stream::new(&gpu)?;
    let (start, end) = (Event::with_timing(&gpu)?, Event::with_timing(&gpu)?);
    let d2h_at = copy_table(&stream, &start, &end, &dev, &host, max)?;
    let peak = check_copies(&mut report, &sysfs, &bus_id, &stream, &dev, &host, &d2h_at)?;

    println!("\n== 5. staged pipeline, copy half (through K pinned bounce buffers, events, staging scheduler)");
    staged_correctness(&mut report, &gpu, &stream)?;
    staged_table(&gpu, &stream, &dev, &d2h_at, max, peak)?;

    println!("\n== 6. threads: made on one, used on a second, released on a third");
    let threads = across_threads(&gpu);
    report.check(
        "buffer, pinned memory, stream and event across three threads",
        threads.is_ok(),
        &threads.unwrap_or_else(|e| e),
    );

    println!("\n== 7. small and odd sizes, each exported as a dma-buf");
    for len in [1, 4097, 65_537, 3 * 64 * KIB + 5, 2 * MIB + 1] {
        odd_size(&mut report, &gpu, len, exports)?;
    }
    Ok(report)
}

/// Prints the driver's version and every GPU: name, bus id, memory, dma-buf and GPUDirect RDMA.
fn print_gpus(driver: &cuda::DriverInfo) -> Result<(), CudaError> {
    println!(
        "CUDA driver API {} ({}), {} GPU(s)",
        driver.version_string(),
        driver.version,
        driver.device_count
    );
    for d in cuda::list_devices()? {
        println!(
            "  GPU {}: {} at {}, {:.1} GiB, dma-buf {}, GPUDirect RDMA {}",
            d.ordinal,
            d.name,
            d.pci_bus_id,
            d.total_memory as f64 / (1u64 << 30) as f64,
            if d.dma_buf_supported { "yes" } else { "no" },
            if d.gpu_direct_rdma_supported {
                "yes"
            } else {
                "no"
            },
        );
    }
    Ok(())
}

/// The GPU `selector` names and its PCI bus id, printed with its PCIe link at idle.
fn open_gpu(selector: &DeviceSelector, sysfs: &Sysfs) -> Result<(Device, String), CudaError> {
    let gpu = Device::open(selector)?;
    println!(
        "using GPU {} ({}, {})",
        gpu.ordinal(),
        gpu.name(),
        gpu.pci_bus_id()
    );
    let bus_id = gpu.pci_bus_id().to_string();
    // Read again under load (section 4) for the judgement: a GPU lowers its link speed at idle.
    match PciFunction::read(sysfs, &bus_id) {
        Ok(f) => println!("PCIe link at idle (sysfs, before any copy): {}", f.link),
        Err(e) => println!("PCIe link at idle (sysfs, before any copy): unknown ({e})"),
    }
    Ok((gpu, bus_id))
}

/// Whether the driver exports dma-bufs, after checking the GPU's GPUDirect RDMA and dma-buf
/// attributes, printing its write-ordering and flush options, and flushing a NIC's writes.
fn check_attributes(report: &mut Report, gpu: &Device) -> Result<bool, CudaError> {
    report.check(
        "GPUDirect RDMA attribute",
        gpu.gpu_direct_rdma_supported(),
        "CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED",
    );
    let exports = gpu.dma_buf_supported();
    if exports {
        report.check(
            "dma-buf attribute",
            true,
            "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED",
        );
    } else {
        report.skip("dma-buf attribute", NO_DMABUF);
    }
    println!(
        "GPUDirect RDMA writes ordering: {}",
        writes_ordering_text(gpu.gpu_direct_rdma_writes_ordering()?)
    );
    println!(
        "GPUDirect RDMA flush-writes options: {}",
        flush_options_text(gpu.gpu_direct_rdma_flush_writes_options()?)
    );
    let flushed = gpu.flush_nic_writes();
    report.check(
        "NIC writes flushed before a read-back where the GPU asks",
        flushed.is_ok(),
        &match flushed {
            Ok(NicWritesFlush::Flushed) => {
                "cuFlushGPUDirectRDMAWrites(CURRENT_CTX, TO_OWNER) called (writes ordering NONE)"
                    .into()
            }
            Ok(NicWritesFlush::NotNeeded) => {
                "not needed: the GPU orders them (or the driver does not say)".into()
            }
            Ok(NicWritesFlush::Unavailable(options)) => format!(
                "not called: writes ordering NONE, but the flush-writes options ({}) lack HOST, so \
                 cuFlushGPUDirectRDMAWrites is not supported; read-backs go unflushed",
                flush_options_text(options)
            ),
            Err(e) => e.to_string(),
        },
    );
    Ok(exports)
}

/// A 64 MiB + 1 B buffer, after checking its rounding, alignment and SYNC_MEMOPS, the pattern
/// written and read back, a planted corruption found, and a fill.
fn check_allocation(report: &mut Report, gpu: &Device) -> Result<DeviceBuffer, CudaError> {
    let len = 64 * MIB + 1;
    let buf = DeviceBuffer::new(gpu, len)?;
    report.check(
        "rounded to 64 KiB",
        buf.allocated_len() == 64 * MIB + 64 * KIB,
        &format!("asked {len}, allocated {}", buf.allocated_len()),
    );
    report.check(
        "64 KiB aligned",
        buf.device_ptr() % (64 * KIB) as u64 == 0,
        &format!("0x{:x}", buf.device_ptr()),
    );
    let sync = buf.sync_memops();
    report.check(
        "SYNC_MEMOPS set on the allocation",
        matches!(sync, Ok(true)),
        &sync.map_or_else(
            |e| e.to_string(),
            |on| {
                format!(
                    "CU_POINTER_ATTRIBUTE_SYNC_MEMOPS reads back {}",
                    u8::from(on)
                )
            },
        ),
    );
    buf.write_pattern(42)?;
    let verified = buf.verify_pattern(42);
    report.check(
        "pattern written and read back",
        verified.is_ok(),
        &verified.map_or_else(|e| e.to_string(), |()| format!("{len} B match the pattern")),
    );
    let planted = 33 * MIB + 7;
    let mut byte = [0u8; 1];
    buf.copy_to_host(planted, &mut byte)?;
    buf.copy_from_host(planted, &[!byte[0]])?;
    let found = buf.verify_pattern(42);
    report.check(
        "planted corruption found",
        matches!(found, Err(CudaError::PatternMismatch { offset, .. }) if offset == planted),
        &match &found {
            Err(e) => e.to_string(),
            Ok(()) => "not found".into(),
        },
    );
    buf.fill(0xA5)?;
    let mut tail = [0u8; 4];
    buf.copy_to_host(len - 4, &mut tail)?;
    report.check("fill", tail == [0xA5; 4], &format!("{tail:02x?}"));
    Ok(buf)
}

/// The copy bandwidth table, 4 KiB .. `max` by fours, printed: (size, D2H GB/s, H2D GB/s)
/// of each size.
fn copy_table(
    stream: &Stream,
    start: &Event,
    end: &Event,
    dev: &DeviceBuffer,
    host: &PinnedBuffer,
    max: usize,
) -> Result<Vec<(usize, f64, f64)>, CudaError> {
    println!("  {:>10} {:>12} {:>12}", "size", "H2D GB/s", "D2H GB/s");
    let mut d2h_at = Vec::new();
    let mut size = 4 * KIB;
    while size <= max {
        let reps = (1usize << 30).div_ceil(size).clamp(4, 2000);
        let h2d = copy_bandwidth(stream, start, end, dev, host, size, reps, true)?;
        let d2h = copy_bandwidth(stream, start, end, dev, host, size, reps, false)?;
        println!("  {:>10} {:>12.2} {:>12.2}", human(size), h2d, d2h);
        d2h_at.push((size, d2h, h2d));
        size *= 4;
    }
    Ok(d2h_at)
}

/// The peak D2H bandwidth of the table, after checking it was measured and judging the peaks
/// against the GPU's PCIe link read under load.
fn check_copies(
    report: &mut Report,
    sysfs: &Sysfs,
    bus_id: &str,
    stream: &Stream,
    dev: &DeviceBuffer,
    host: &PinnedBuffer,
    d2h_at: &[(usize, f64, f64)],
) -> Result<f64, CudaError> {
    let peak = d2h_at.iter().map(|x| x.1).fold(0.0, f64::max);
    report.check(
        "copy bandwidth measured",
        peak > 1.0,
        &format!("peak D2H {peak:.2} GB/s"),
    );
    let peak_h2d = d2h_at.iter().map(|x| x.2).fold(0.0, f64::max);
    match link_under_load(sysfs, bus_id, stream, dev, host)? {
        Ok(link) => {
            println!("  PCIe link under load (sysfs, read while copies run): {link}");
            judge_copies(report, &link, peak_h2d, peak);
        }
        Err(e) => report.skip(
            "copy bandwidth against the GPU's PCIe link",
            &format!("the link is unknown ({e})"),
        ),
    }
    Ok(peak)
}

/// Prints the staged pipeline's speed for a few chunk sizes and depths, each half as a share
/// of the plain copy in its direction at `max` (section 4's table): what the staging costs.
fn staged_table(
    gpu: &Device,
    stream: &Stream,
    dev: &DeviceBuffer,
    d2h_at: &[(usize, f64, f64)],
    max: usize,
    peak: f64,
) -> Result<(), CudaError> {
    let plain_d2h = d2h_at.iter().find(|x| x.0 == max).map_or(peak, |x| x.1);
    let plain_h2d = d2h_at.iter().find(|x| x.0 == max).map_or(peak, |x| x.2);
    println!(
        "  {:>8} {:>5} {:>14} {:>7} {:>14} {:>7}",
        "chunk", "K", "send D2H GB/s", "%plain", "recv H2D GB/s", "%plain"
    );
    for chunk in [256 * KIB, MIB, 4 * MIB] {
        for depth in [2, 4, 8] {
            let cfg = StagingConfig::new(chunk, depth)?;
            let messages = 4;
            let send = staged_send(gpu, stream, dev, cfg, messages)?;
            let recv = staged_recv(gpu, stream, dev, cfg, messages)?;
            println!(
                "  {:>8} {:>5} {:>14.2} {:>6.0}% {:>14.2} {:>6.0}%",
                human(chunk),
                depth,
                send,
                100.0 * send / plain_d2h,
                recv,
                100.0 * recv / plain_h2d
            );
        }
    }
    Ok(())
}

/// Why the dma-buf checks skip where the driver cannot export.
const NO_DMABUF: &str = "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0: this driver cannot export GPU memory as a \
     dma-buf (NVIDIA's proprietary kernel modules say so; the open kernel modules can), so --mem cuda cannot run \
     here; --mem cuda-peermem (nvidia-peermem) and cuda-staged do not need it";

/// The GPU's link read from sysfs while a batch of 256 MiB host-to-device copies runs (a GPU lowers its link
/// speed at idle, and raises it under load): the outer error is the copies', the inner one sysfs's.
fn link_under_load(
    sysfs: &Sysfs,
    bus_id: &str,
    stream: &Stream,
    dev: &DeviceBuffer,
    host: &PinnedBuffer,
) -> Result<topo::Result<PciLink>, CudaError> {
    for _ in 0..8 {
        // SAFETY: the CPU does not touch `host` while the copies run; the stream is synchronised before this
        // function returns; both buffers outlive it.
        unsafe { stream.copy_host_to_device(dev, 0, host, 0, dev.len())? };
    }
    let link = PciFunction::read(sysfs, bus_id).map(|f| f.link);
    stream.synchronize()?;
    Ok(link)
}

/// The copies' peaks against what `link` (read under load) carries at the speed and width both its ends can do
/// (`topo`'s rule: the GPU's capability and the port's above it): PASS at [`LINK_SHARE`] or more on a link not
/// trained down; else FAIL, naming the link and how it trained. Where what both ends can do cannot be told (the
/// port above unreadable), the copies are judged against the link as it runs, and the line says so.
fn judge_copies(report: &mut Report, link: &PciLink, h2d: f64, d2h: f64) {
    let name = "copy bandwidth against the GPU's PCIe link";
    let (gen, width) = match (link.capable_gen(), link.capable_width()) {
        (Some(gen), Some(width)) => (gen, width),
        _ => match (link.gen(), link.width) {
            (Some(gen), Some(width)) => (gen, width),
            _ => {
                return report.skip(
                    name,
                    &format!("sysfs gives no speed or width for it ({link})"),
                )
            }
        },
    };
    // MPS from config (root only); 256 B, the common value, where it cannot be read.
    let mps = link.mps.unwrap_or(256);
    let ceiling = Pcie { gen, width, mps }.gbps();
    let best = h2d.max(d2h);
    let share = best / ceiling;
    let trained = match link.training() {
        Training::Unknown => format!(
            "{}: judged against the link as it runs",
            link.training_note().unwrap_or_default()
        ),
        _ => link
            .training_note()
            .unwrap_or_else(|| "running at what both ends can do".to_string()),
    };
    report.check(
        name,
        share >= LINK_SHARE && !link.is_downtrained(),
        &format!(
            "peak H2D {h2d:.2}, D2H {d2h:.2} GB/s: {:.0}% of the {:.1} GB/s a Gen{gen} x{width} link carries \
             (MPS {mps}; {:.0}% needed); {trained}",
            share * 100.0,
            ceiling,
            LINK_SHARE * 100.0
        ),
    );
}

/// "OWNER (100): ...", from `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING`.
fn writes_ordering_text(value: Option<i32>) -> String {
    match value {
        None => "unknown to this driver".into(),
        Some(0) => "NONE (0): a NIC's writes need a flush before the GPU sees them in order".into(),
        Some(100) => "OWNER (100): ordered for this GPU's own work".into(),
        Some(200) => "ALL_DEVICES (200): ordered for every device".into(),
        Some(v) => format!("{v} (unknown value)"),
    }
}

/// "HOST | MEMOPS (3)", from `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS`.
fn flush_options_text(value: Option<i32>) -> String {
    let Some(v) = value else {
        return "unknown to this driver".into();
    };
    let mut names = Vec::new();
    if v & 1 != 0 {
        names.push("HOST (cuFlushGPUDirectRDMAWrites)");
    }
    if v & 2 != 0 {
        names.push("MEMOPS (stream memory operations)");
    }
    if names.is_empty() {
        names.push("none");
    }
    format!("{} ({v})", names.join(" | "))
}

/// Runs `f` on a thread of its own; a panic or an error becomes the message.
fn on_thread<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, CudaError> + Send + 'static,
) -> Result<T, String> {
    std::thread::spawn(f)
        .join()
        .map_err(|_| "the thread panicked".to_string())?
        .map_err(|e| e.to_string())
}

/// Allocation on one thread, use on a second, release on a third (each binds the context itself).
fn across_threads(gpu: &Device) -> Result<String, String> {
    let len = 4 * MIB + 3;
    let g = gpu.clone();
    let made = on_thread(move || {
        let buf = DeviceBuffer::new(&g, len)?;
        buf.write_pattern(11)?;
        Ok((
            buf,
            PinnedBuffer::new(&g, len)?,
            Stream::new(&g)?,
            Event::new(&g)?,
        ))
    })?;
    let used = on_thread(move || {
        let (buf, pinned, stream, done) = made;
        // SAFETY: `pinned` is read only after the event completed; both buffers outlive the copy.
        unsafe { stream.copy_device_to_host(&pinned, 0, &buf, 0, len)? };
        stream.record(&done)?;
        done.synchronize()?;
        buf.verify_pattern(11)?;
        let bad = cuda::pattern::first_mismatch(11, 0, pinned.as_slice());
        Ok((bad, (buf, pinned, stream, done)))
    })?;
    let (bad, resources) = used;
    if let Some((at, want, got)) = bad {
        return Err(format!(
            "the copy on thread 2 moved byte {at} as {got:#04x}, expected {want:#04x}"
        ));
    }
    let g = gpu.clone();
    on_thread(move || {
        drop(resources);
        let again = DeviceBuffer::new(&g, len)?;
        again.fill(1)?;
        Ok(())
    })?;
    Ok(format!(
        "{len} B copied and checked on thread 2, released and allocated again on thread 3"
    ))
}

/// One small or odd size: allocated, pattern-checked, exported whole as a dma-buf (where the driver `exports`).
fn odd_size(report: &mut Report, gpu: &Device, len: usize, exports: bool) -> Result<(), CudaError> {
    let buf = DeviceBuffer::new(gpu, len)?;
    let aligned = buf.device_ptr() % (64 * KIB) as u64 == 0;
    let sized = buf.allocated_len() == cuda::gpu_alloc_len(len)?;
    buf.write_pattern(len as u64)?;
    let verified = buf.verify_pattern(len as u64);
    report.check(
        &format!("{len} B allocated"),
        aligned && sized && verified.is_ok(),
        &format!(
            "{} path, {} B at 0x{:x}, pattern {}",
            if buf.is_padded() { "padded" } else { "direct" },
            buf.allocated_len(),
            buf.device_ptr(),
            verified.map_or_else(|e| e.to_string(), |()| "intact".into())
        ),
    );
    check_dmabuf(report, &buf, 0, len, exports);
    Ok(())
}

/// One dma-buf export of `len` bytes at `offset`, checked; SKIP where the driver cannot export (`exports` false).
fn check_dmabuf(report: &mut Report, buf: &DeviceBuffer, offset: usize, len: usize, exports: bool) {
    let name = format!("dma-buf export of {} at +{offset}", human(len));
    if !exports {
        return report.skip(
            &name,
            "the driver cannot export dma-bufs (the dma-buf attribute, section 1)",
        );
    }
    match buf.export_dmabuf(offset, len) {
        Ok(d) => {
            let exporter = d.exporter();
            let range = d.exported_range();
            let iova_ok = d.iova() == buf.device_ptr() + offset as u64;
            let page = cuda::host_page_size() as u64;
            let arith_ok = range.base + d.offset() == d.iova()
                && range.base % page == 0
                && (range.len as u64).is_multiple_of(page);
            let ok = matches!(&exporter, Ok(Some(_))) && iova_ok && arith_ok && d.len() == len;
            report.check(
                &name,
                ok,
                &format!(
                    "fd {} exp_name {:?}, ibv_reg_dmabuf_mr(offset {}, len {}, iova 0x{:x}), exported 0x{:x}+{}",
                    d.raw_fd(),
                    exporter.as_ref().map(|e| e.as_deref().unwrap_or("<none: not a dma-buf>")),
                    d.offset(),
                    d.len(),
                    d.iova(),
                    range.base,
                    range.len
                ),
            );
        }
        Err(e) => report.check(&name, false, &e.to_string()),
    }
}

#[allow(clippy::too_many_arguments)]
fn copy_bandwidth(
    stream: &Stream,
    start: &Event,
    end: &Event,
    dev: &DeviceBuffer,
    host: &PinnedBuffer,
    size: usize,
    reps: usize,
    to_device: bool,
) -> Result<f64, CudaError> {
    let queue = |n: usize| -> Result<(), CudaError> {
        for _ in 0..n {
            // SAFETY: the host buffer is not touched by the CPU while copies run; the stream is synchronised
            // before this function returns; both buffers outlive it.
            unsafe {
                if to_device {
                    stream.copy_host_to_device(dev, 0, host, 0, size)?;
                } else {
                    stream.copy_device_to_host(host, 0, dev, 0, size)?;
                }
            }
        }
        Ok(())
    };
    queue(2)?; // warm-up
    stream.record(start)?;
    queue(reps)?;
    stream.record(end)?;
    end.synchronize()?;
    let ms = Event::elapsed_ms(start, end)? as f64;
    Ok(gbps(size * reps, ms / 1e3))
}

/// The pinned bounce buffers of `cfg` (one allocation) and an event per buffer.
fn bounce_buffers(
    gpu: &Device,
    cfg: StagingConfig,
) -> Result<(PinnedBuffer, Vec<Event>), CudaError> {
    let bounce = PinnedBuffer::new(gpu, cfg.bounce_bytes())?;
    let events = (0..cfg.depth)
        .map(|_| Event::new(gpu))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((bounce, events))
}

/// The sender's copy half with the network half absent (an RDMA "completes" as soon as it is posted).
fn staged_send(
    gpu: &Device,
    stream: &Stream,
    payload: &DeviceBuffer,
    cfg: StagingConfig,
    messages: u64,
) -> Result<f64, CudaError> {
    let plan = StagingPlan::new(cfg, payload.len(), messages)?;
    let (bounce, events) = bounce_buffers(gpu, cfg)?;
    let mut tx = SendPipeline::new(plan);
    let t0 = Instant::now();
    while !tx.is_finished() {
        while let Some(c) = tx.next_copy_to_start() {
            // SAFETY: the scheduler hands out a bounce buffer only when nothing else uses it; the CPU never
            // touches it; the stream is drained (pipeline finished) before `bounce` is dropped.
            unsafe {
                stream.copy_device_to_host(&bounce, c.buffer_offset, payload, c.offset, c.len)?
            };
            stream.record(&events[c.buffer])?;
        }
        while let Some(c) = tx.oldest_copy_in_flight() {
            if !events[c.buffer].is_complete()? {
                break;
            }
            tx.copy_done(c.seq)?;
        }
        while let Some(c) = tx.next_post() {
            tx.rdma_done(c.seq)?;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    stream.synchronize()?;
    Ok(gbps(payload.len() * messages as usize, secs))
}

/// The receiver's copy half with the network half absent (a chunk "lands" as soon as its buffer is free).
fn staged_recv(
    gpu: &Device,
    stream: &Stream,
    payload: &DeviceBuffer,
    cfg: StagingConfig,
    messages: u64,
) -> Result<f64, CudaError> {
    let plan = StagingPlan::new(cfg, payload.len(), messages)?;
    let (bounce, events) = bounce_buffers(gpu, cfg)?;
    let mut rx = RecvPipeline::new(plan);
    let t0 = Instant::now();
    while !rx.is_finished() {
        while let Some(c) = rx.next_landing() {
            rx.landed(c.seq)?;
        }
        while let Some(c) = rx.next_copy_to_start() {
            // SAFETY: as in staged_send; the source range is not written while the copy runs.
            unsafe {
                stream.copy_host_to_device(payload, c.offset, &bounce, c.buffer_offset, c.len)?
            };
            stream.record(&events[c.buffer])?;
        }
        while let Some(c) = rx.oldest_copy_in_flight() {
            if !events[c.buffer].is_complete()? {
                break;
            }
            rx.copy_done(c.seq)?;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    stream.synchronize()?;
    Ok(gbps(payload.len() * messages as usize, secs))
}

/// Bytes through the real copies, scheduled by the staging pipelines, land intact: GPU -> bounce -> host on the
/// sending side, host -> bounce -> GPU on the receiving side, with a partial last chunk.
fn staged_correctness(report: &mut Report, gpu: &Device, stream: &Stream) -> Result<(), CudaError> {
    let len = 16 * MIB + 12_345;
    let cfg = StagingConfig::new(MIB, 4)?;
    let plan = StagingPlan::new(cfg, len, 2)?;
    let src = DeviceBuffer::new(gpu, len)?;
    src.write_pattern(7)?;
    let (mut bounce, events) = bounce_buffers(gpu, cfg)?;

    // Sender: the "NIC" reads each bounce buffer when the chunk is posted (its copy has completed).
    let mut wire = vec![0u8; len];
    let mut tx = SendPipeline::new(plan);
    while !tx.is_finished() {
        while let Some(c) = tx.next_copy_to_start() {
            // SAFETY: the CPU reads this bounce range only after its event completed (next_post below).
            unsafe { stream.copy_device_to_host(&bounce, c.buffer_offset, &src, c.offset, c.len)? };
            stream.record(&events[c.buffer])?;
        }
        while let Some(c) = tx.oldest_copy_in_flight() {
            if !events[c.buffer].is_complete()? {
                break;
            }
            tx.copy_done(c.seq)?;
        }
        while let Some(c) = tx.next_post() {
            if c.message == 1 {
                wire[c.offset..c.offset + c.len]
                    .copy_from_slice(bounce.range(c.buffer_offset, c.len)?);
            }
            tx.rdma_done(c.seq)?;
        }
    }
    let bad = cuda::pattern::first_mismatch(7, 0, &wire);
    report.check(
        "staged send: bytes through D2H bounce buffers intact",
        bad.is_none(),
        &bad.map_or_else(
            || format!("{len} B match the pattern"),
            |(at, want, got)| format!("byte {at} is {got:#04x}, expected {want:#04x}"),
        ),
    );

    // Receiver: the "NIC" writes each chunk into its bounce buffer when it lands; H2D copies take it to the GPU.
    let dst = DeviceBuffer::new(gpu, len)?;
    dst.fill(0)?;
    let mut rx = RecvPipeline::new(plan);
    while !rx.is_finished() {
        while let Some(c) = rx.next_landing() {
            cuda::pattern::fill(
                9,
                c.offset as u64,
                bounce.range_mut(c.buffer_offset, c.len)?,
            );
            rx.landed(c.seq)?;
        }
        while let Some(c) = rx.next_copy_to_start() {
            // SAFETY: the CPU writes this bounce range again only after the buffer is handed out anew, i.e.
            // after this copy's event completed.
            unsafe { stream.copy_host_to_device(&dst, c.offset, &bounce, c.buffer_offset, c.len)? };
            stream.record(&events[c.buffer])?;
        }
        while let Some(c) = rx.oldest_copy_in_flight() {
            if !events[c.buffer].is_complete()? {
                break;
            }
            rx.copy_done(c.seq)?;
        }
    }
    stream.synchronize()?;
    let verified = dst.verify_pattern(9);
    report.check(
        "staged recv: bytes through H2D bounce buffers intact",
        verified.is_ok(),
        &verified.map_or_else(|e| e.to_string(), |()| format!("{len} B match the pattern")),
    );
    Ok(())
}
