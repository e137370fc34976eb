//! Every option of perftest 6.29 answered by name: accepted (rdmabench's own option of that
//! name, an alias, or a translation where perftest's unit or form differs), ignored where
//! there is nothing to do, or refused with why and rdmabench's way to the same.
//!
//! The names, whether each takes a value and its short letter come from perftest 6.29's
//! `perftest_parameters.c` (its `long_options` table, conditional entries included, and the
//! letters of its getopt string); the meanings are paraphrased from its usage text. The
//! answers are rdmabench's. [`rewrite`] applies the table to a test's (or `cluster`'s)
//! arguments before clap reads them, so that a perftest name never meets a clap tip to an
//! unrelated flag; [`reference_markdown`] is the table for the options reference.

mod rewrite;

pub(crate) use rewrite::apply;

/// One perftest option.
#[derive(Debug, Clone, Copy)]
pub struct PerftestName {
    /// The long name, as perftest spells it (dashes and underscores as they are).
    pub long: &'static str,
    /// Its short letter, where perftest's getopt string takes one.
    pub short: Option<char>,
    /// An example value where it takes one; `None` for a switch.
    pub value: Option<&'static str>,
    /// What it means in perftest, with its unit.
    pub meaning: &'static str,
    /// rdmabench's answer.
    pub answer: Answer,
}

/// rdmabench's answer to a perftest option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// rdmabench's own option of the same name, same meaning.
    Same,
    /// rdmabench's option under another spelling, same meaning and unit; with a note where
    /// the two differ in a detail.
    Alias(&'static str, &'static str),
    /// Accepted and translated into rdmabench's option: perftest's unit or form differs.
    Translated(Translation),
    /// Accepted and ignored: why there is nothing to do.
    Ignored(&'static str),
    /// Refused: why, and rdmabench's way to the same.
    Refused(&'static str, &'static str),
}

/// The translations, each applied in [`rewrite`] with what else the command line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Translation {
    /// `-w`: a bare number in perftest's report unit, MiB/s (Gb/s with `--report_gbits`).
    LimitBw,
    /// A bare number in Gb/s, or in `--rate_units`; software pacing.
    RateLimit,
    /// `M` (MiB/s) or `g` (Gb/s) for `--rate_limit`; `p` (packets) is refused.
    RateUnits,
    /// `SW` is rdmabench's pacing; `HW` and `PP` are refused.
    RateLimitType,
    /// `--json perftest_out.json`, perftest's default file.
    OutJson,
    /// `--json FILE`.
    OutJsonFile,
    /// `--mem cuda-peermem:BUS` (`cuda:BUS` with `--use_cuda_dmabuf`).
    CudaBusId,
    /// With `--use_cuda_bus_id`, folded into its `--mem`; else as it is.
    CudaDmabuf,
    /// `--use_cuda_pcie_mapping` and `--use_data_direct`: with `--use_cuda_dmabuf` only; with
    /// `--use_cuda_bus_id`, folded into its `--mem` (cuda-pcie, cuda-data-direct); else as it is.
    CudaDmabufVia,
}

impl Translation {
    /// rdmabench's option and how the value is carried over.
    pub(crate) fn describe(self) -> (&'static str, &'static str) {
        match self {
            Translation::LimitBw => (
                "--limit-bw",
                "a bare number is MiB/s, or Gb/s with --report_gbits, as perftest's report \
                 (-w 1000 is --limit-bw 1000MiB/s); rdmabench's own bare --limit-bw is in \
                 its table's unit, GB/s or Gb/s",
            ),
            Translation::RateLimit => (
                "--rate-limit",
                "a bare number is Gb/s (or --rate_units M: MiB/s); rdmabench paces in \
                 software, as --rate_limit_type SW (perftest's default is the NIC's limiter)",
            ),
            Translation::RateUnits => (
                "--rate-limit",
                "M (MiB/s) and g (Gb/s) set --rate_limit's unit; p (packets/s) is refused: \
                 rdmabench paces bytes",
            ),
            Translation::RateLimitType => (
                "--rate-limit",
                "SW is rdmabench's pacing; HW and PP are refused: the NIC's rate limiter and \
                 packet pacing are not offered",
            ),
            Translation::OutJson => (
                "--json",
                "--json perftest_out.json: rdmabench's record (results/schema.md), not \
                 perftest's keys",
            ),
            Translation::OutJsonFile => (
                "--json",
                "--json FILE: rdmabench's record (results/schema.md), not perftest's keys",
            ),
            Translation::CudaBusId => (
                "--mem",
                "--mem cuda-peermem:BUS, or cuda:BUS (dma-buf) with --use_cuda_dmabuf",
            ),
            Translation::CudaDmabuf => (
                "--use_cuda_dmabuf",
                "with --use_cuda=N as rdmabench's; with --use_cuda_bus_id folded into its --mem",
            ),
            Translation::CudaDmabufVia => (
                "--mem",
                "with --use_cuda_dmabuf only, as perftest: --mem cuda-pcie:GPU (dma-buf mapped \
                 through PCIe, CUDA 12.8+) and cuda-data-direct:GPU (that, registered through the \
                 mlx5 NIC's Data Direct function)",
            ),
        }
    }
}

const RAW: (&str, &str) = (
    "raw Ethernet (ib_raw_bw) is not one of rdmabench's tests",
    "the RDMA tests: write-bw, read-bw, send-bw, atomic-bw and their -lat (rdmabench --help)",
);
const MCAST: (&str, &str) = (
    "multicast is not one of rdmabench's tests",
    "send-bw -c UD measures datagrams between two hosts",
);
const ACCEL: (&str, &str) = (
    "rdmabench's accelerator memory is CUDA's or ROCm's",
    "--mem cuda[:GPU], rocm[:GPU] (or their -peermem and -staged modes), or --mem host",
);
const CRYPTO: (&str, &str) = (
    "encryption and signature offloads are not measured",
    "leave it out: rdmabench moves plain payload",
);
const DC: (&str, &str) = ("the DC transport is not offered", "-c RC, UC or UD");
const SAMPLES: (&str, &str) = (
    "rdmabench does not print every latency sample",
    "the table's percentiles (p50 to p99.99, max) and --json FILE with min, mean and stdev",
);
const NOT_SET: &str = "leave it out";

const fn row(
    long: &'static str,
    short: char,
    value: &'static str,
    meaning: &'static str,
    answer: Answer,
) -> PerftestName {
    PerftestName {
        long,
        short: if short == ' ' { None } else { Some(short) },
        value: if value.is_empty() { None } else { Some(value) },
        meaning,
        answer,
    }
}

const fn no(why: (&'static str, &'static str)) -> Answer {
    Answer::Refused(why.0, why.1)
}

use Answer::{Alias as A, Ignored as I, Refused as R, Same as S, Translated as T};
use Translation as Tr;

/// perftest 6.29's long options, in its table's order.
#[rustfmt::skip]
pub const NAMES: &[PerftestName] = &[
    row("port", 'p', "18515", "TCP port to listen on or connect to", S),
    row("ib-dev", 'd', "mlx5_0", "RDMA device", S),
    row("ib-port", 'i', "1", "port of the device", S),
    row("mtu", 'm', "4096", "path MTU in bytes", S),
    row("size", 's', "65536", "message size in bytes", S),
    row("iters", 'n', "1000", "exchanges per size", S),
    row("tx-depth", 't', "64", "send queue depth", S),
    row("qp-timeout", 'u', "14", "QP ack timeout, 4.096 us x 2^N", S),
    row("sl", 'S', "0", "service level", S),
    row("gid-index", 'x', "3", "GID index", S),
    row("all", 'a', "", "sizes 2 B to 8 MiB", S),
    row("CPU-freq", 'F', "", "no warning about cpufreq", A("-F", "ignored: rdmabench calibrates its clock")),
    row("connection", 'c', "UC", "transport RC/XRC/UC/UD/DC/SRD", S),
    row("qp", 'q', "4", "number of QPs", A("--qps", "")),
    row("events", 'e', "", "sleep on CQ events instead of polling", R("rdmabench polls its completion queues", "leave it out: polling is what perftest measures by default")),
    row("vector", 'X', "0", "completion vector of -e's events", R("rdmabench sleeps on no completion events", NOT_SET)),
    row("inline_size", 'I', "64", "largest inline message in bytes", A("--inline-size", "")),
    row("outs", 'o', "16", "outstanding READs/atomics", S),
    row("mcg", 'g', "", "send to a multicast group", no(MCAST)),
    row("comm_rdma_cm", 'z', "", "exchange endpoints through the RDMA CM", R("rdmabench exchanges its plan and endpoints over its TCP control channel", "-R connects the QPs through the RDMA CM")),
    row("rdma_cm", 'R', "", "connect the QPs with the RDMA CM", A("--rdma-cm", "")),
    row("tos", 'T', "96", "TOS byte of -R's CM QPs, 0-255", A("--tclass", "rdmabench sets it with or without -R")),
    row("hop_limit", 'L', "64", "GRH hop limit (TTL)", R("the hop limit is not settable: rdmabench sends 64", NOT_SET)),
    row("help", 'h', "", "show the help", S),
    row("MGID", 'M', "ff0e::1", "multicast group GID", no(MCAST)),
    row("rx-depth", 'r', "512", "receive queue depth", S),
    row("bidirectional", 'b', "", "both sides send", S),
    row("cq-mod", 'Q', "16", "a completion every N work requests", S),
    row("noPeak", 'N', "", "no peak bandwidth", I("rdmabench reports no peak bandwidth: nothing to cancel")),
    row("version", 'V', "", "show the version", S),
    row("report-cycles", 'C', "", "latency in CPU cycles", R("rdmabench reports latency in microseconds", "--clock tsc for the calibrated TSC; figures stay in us")),
    row("report-histogrm", 'H', "", "print every latency sample (perftest's spelling)", no(SAMPLES)),
    row("report-unsorted", 'U', "", "print samples unsorted", no(SAMPLES)),
    row("atomic_type", 'A', "CMP_AND_SWAP", "atomic operation", A("--atomic-type", "")),
    row("dualport", 'O', "", "run on both ports of the device", R("rdmabench runs one port per device", "-i PORT, or several devices as rails: -d dev1,dev2")),
    row("post_list", 'l', "8", "work requests per post", A("--post-list", "")),
    row("duration", 'D', "10", "seconds per size", S),
    row("margin", 'f', "2", "seconds left out at each end of -D", R("the margin is fixed: a tenth of -D, at most 2 s, at each end", "a longer -D for a longer measured window")),
    row("source_mac", 'B', "00:11:22:33:44:55", "raw Ethernet source MAC", no(RAW)),
    row("dest_mac", 'E', "00:11:22:33:44:55", "raw Ethernet destination MAC", no(RAW)),
    row("dest_ip", 'J', "10.0.0.2", "raw Ethernet destination IP", no(RAW)),
    row("source_ip", 'j', "10.0.0.1", "raw Ethernet source IP", no(RAW)),
    row("dest_port", 'K', "5000", "raw Ethernet destination UDP port", no(RAW)),
    row("source_port", 'k', "5000", "raw Ethernet source UDP port", no(RAW)),
    row("ethertype", ' ', "0x0800", "raw Ethernet ethertype", no(RAW)),
    row("limit_bw", 'w', "1000", "fail below this bandwidth, in the report's unit (MiB/s)", T(Tr::LimitBw)),
    row("limit_msgrate", 'y', "10", "fail below this message rate (Mpps)", R("rdmabench has no message-rate threshold", "--limit-bw RATE: at one size, rate x size")),
    row("server", 'Z', "", "be the server", R("rdmabench tells the role by SERVER_HOST", "leave SERVER_HOST out to be the server")),
    row("client", 'P', "", "be the client", R("rdmabench tells the role by SERVER_HOST", "give SERVER_HOST to be the client")),
    row("mac_fwd", 'v', "", "raw Ethernet MAC forwarding", no(RAW)),
    row("use_rss", ' ', "", "raw Ethernet RSS", no(RAW)),
    row("report-counters", 'W', "counters/port_xmit_data", "print these counters' change", R("counters are not picked by name", "the record (--json FILE) holds every port counter's change")),
    row("force-link", ' ', "IB", "force the link layer", R("the link layer is the port's", "rdmabench devices shows each port's")),
    row("remote_mac", ' ', "00:11:22:33:44:55", "raw Ethernet peer MAC", no(RAW)),
    row("local_mac", ' ', "00:11:22:33:44:55", "raw Ethernet own MAC", no(RAW)),
    row("remote_ip", ' ', "10.0.0.2", "raw Ethernet peer IP", no(RAW)),
    row("local_ip", ' ', "10.0.0.1", "raw Ethernet own IP", no(RAW)),
    row("remote_port", ' ', "5000", "raw Ethernet peer port", no(RAW)),
    row("local_port", ' ', "5000", "raw Ethernet own port", no(RAW)),
    row("run_infinitely", ' ', "", "run forever, a report every -D seconds", R("every rdmabench run ends", "-D SECS with --interval SECS, or --repeat N")),
    row("report_gbits", ' ', "", "bandwidth in Gb/s instead of MiB/s", A("--report-gbits", "rdmabench's default is GB/s, not MiB/s")),
    row("use-srq", ' ', "", "a shared receive queue", A("--srq", "")),
    row("no_lock", ' ', "", "lock-free verbs through a thread domain", R("thread domains are not offered", "--threads N gives each thread its own QPs and CQ")),
    row("use-null-mr", ' ', "", "a null memory region", R("null memory regions are not offered", "--mem host")),
    row("report-both", ' ', "", "-b: report RX and TX apart", I("rdmabench's -b table always shows each direction under the total")),
    row("reversed", ' ', "", "the server sends to the client", R("the client always drives the run", "swap the hosts: start the server where the client ran")),
    row("pkey_index", ' ', "0", "P_Key index", A("--pkey-index", "")),
    row("tcp", ' ', "", "raw Ethernet TCP packets", no(RAW)),
    row("burst_size", ' ', "16", "messages per burst of the rate limiter", R("the pacer's burst is one post list", "--rate-limit RATE with -l N")),
    row("typical_pkt_size", ' ', "1024", "packet size of packet pacing", R("packet pacing (raw Ethernet) is not offered", "--rate-limit RATE")),
    row("rate_limit", ' ', "10", "rate limit, Gb/s unless --rate_units", T(Tr::RateLimit)),
    row("rate_limit_type", ' ', "SW", "rate limiter: HW, SW or PP", T(Tr::RateLimitType)),
    row("rate_units", ' ', "g", "--rate_limit's unit: M (MiB/s), g (Gb/s), p (pps)", T(Tr::RateUnits)),
    row("output", ' ', "bandwidth", "print one figure only", R("the report is the table", "--csv - or --json - for figures a script reads")),
    row("cpu_util", ' ', "", "CPU utilization (with -D)", R("CPU utilization is not measured", "the record's placement names the measuring thread's CPU")),
    row("out_json", ' ', "", "write the report as JSON", T(Tr::OutJson)),
    row("out_json_file", ' ', "run.json", "the JSON report's file", T(Tr::OutJsonFile)),
    row("latency_gap", ' ', "10", "delay between posts of a latency test", A("--latency-gap", "the wait is not counted in the latency, as it is in perftest's")),
    row("flow_label", ' ', "1", "GRH flow label per QP", R("the flow label is not settable: rdmabench sends 0", NOT_SET)),
    row("retry_count", ' ', "7", "RDMA CM retry count", A("--retry-count", "perftest sets it with -R only; rdmabench on every RC QP")),
    row("dont_xchg_versions", ' ', "", "skip the version exchange", R("both sides always agree on the protocol and plan", NOT_SET)),
    row("payload_file_path", ' ', "payload.txt", "payload pattern from a file", R("the payload is rdmabench's own pattern", "--validate checks it")),
    row("use_cuda", ' ', "0", "GPU memory on CUDA GPU N", S),
    row("use_cuda_bus_id", ' ', "0000:41:00.0", "GPU memory on the CUDA GPU at this bus id", T(Tr::CudaBusId)),
    row("use_cuda_dmabuf", ' ', "", "register GPU memory through dma-buf", T(Tr::CudaDmabuf)),
    row("use_cuda_pcie_mapping", ' ', "", "dma-buf mapped through PCIe BAR1", T(Tr::CudaDmabufVia)),
    row("use_data_direct", ' ', "", "Data Direct dma-buf", T(Tr::CudaDmabufVia)),
    row("cuda_mem_type", ' ', "1", "CUDA memory type: 0 device, 1 managed, 4 malloc", R("rdmabench's CUDA memory is device memory (type 0)", "--mem cuda:GPU, or --mem host")),
    row("use_musa", ' ', "0", "Moore Threads GPU memory", no(ACCEL)),
    row("use_musa_bus_id", ' ', "0000:41:00.0", "Moore Threads GPU by bus id", no(ACCEL)),
    row("use_musa_dmabuf", ' ', "", "Moore Threads dma-buf", no(ACCEL)),
    row("use_musa_pcie_mapping", ' ', "", "Moore Threads BAR1 mapping", no(ACCEL)),
    row("use_rocm", ' ', "0", "GPU memory on ROCm GPU N", S),
    row("use_rocm_dmabuf", ' ', "", "register ROCm memory through dma-buf", S),
    row("use_neuron", ' ', "0", "AWS Neuron core memory", no(ACCEL)),
    row("use_neuron_dmabuf", ' ', "", "Neuron dma-buf", no(ACCEL)),
    row("use_hl", ' ', "0", "Habana Gaudi memory", no(ACCEL)),
    row("use_mlu", ' ', "0", "Cambricon MLU memory", no(ACCEL)),
    row("use_mlu_dmabuf", ' ', "", "Cambricon dma-buf", no(ACCEL)),
    row("use_opencl", ' ', "0", "OpenCL device memory", no(ACCEL)),
    row("opencl_platform_id", ' ', "0", "OpenCL platform", no(ACCEL)),
    row("use_ib_dm_dmabuf", ' ', "mlx5_0", "the NIC's device memory through dma-buf", R("NIC device memory is not offered", "--mem host or a GPU's --mem")),
    row("gpu_touch", ' ', "once", "the GPU touches the buffer during the test", R("the GPU does not touch the buffer while the NIC moves it", NOT_SET)),
    row("mmap", ' ', "/dev/buf", "an mmap'd file as the buffer", R("buffers are rdmabench's own allocations", "--mem host, --use-hugepages, or a GPU's --mem")),
    row("mmap-offset", ' ', "0", "offset into --mmap's file", R("buffers are rdmabench's own allocations", "--mem host, --use-hugepages, or a GPU's --mem")),
    row("ipv6", ' ', "", "an IPv6 GID", R("the GID is -x's or perftest's rule (RoCE v2, IPv4-mapped first)", "-x INDEX of an IPv6 GID (rdmabench devices lists them)")),
    row("ipv6-addr", ' ', "", "negotiate over IPv6", R("the control channel's family follows its address", "an IPv6 SERVER_HOST, and --bind :: on the server")),
    row("raw_ipv6", ' ', "", "raw Ethernet IPv6", no(RAW)),
    row("report-per-port", ' ', "", "dual-port figures per port", R("rdmabench runs one port per device", "rails (-d dev1,dev2) report each rail")),
    row("odp", ' ', "", "on-demand paging", S),
    row("use_hugepages", ' ', "", "buffers on huge pages", A("--use-hugepages", "")),
    row("use_old_post_send", ' ', "", "post with ibv_post_send", R("rdmabench has one way of posting", NOT_SET)),
    row("promiscuous", ' ', "", "raw Ethernet promiscuous mode", no(RAW)),
    row("sniffer", ' ', "", "raw Ethernet sniffer", no(RAW)),
    row("raw_mcast", ' ', "", "raw Ethernet multicast", no(RAW)),
    row("mr_per_qp", ' ', "", "a memory region per QP", A("--mr-per-qp", "it goes with --validate too")),
    row("dlid", ' ', "1", "destination LID", R("the LID comes from the peer over the control channel", NOT_SET)),
    row("tclass", ' ', "0x68", "GRH traffic class", S),
    row("wait_destroy", ' ', "5", "seconds to wait before freeing resources", R("resources are freed as the run ends", NOT_SET)),
    row("flows", ' ', "4", "raw Ethernet flows", no(RAW)),
    row("flows_burst", ' ', "4", "raw Ethernet packets per flow", no(RAW)),
    row("reply_every", ' ', "4", "raw Ethernet latency reply rate", no(RAW)),
    row("perform_warm_up", ' ', "", "warm-up iterations before measuring", R("bandwidth iteration runs have no warm-up", "-D SECS, whose measured window leaves its ends out")),
    row("vlan_en", ' ', "", "raw Ethernet VLAN", no(RAW)),
    row("vlan_pcp", ' ', "3", "raw Ethernet VLAN priority", no(RAW)),
    row("recv_post_list", ' ', "8", "receive work requests per post", R("receives are posted one at a time", "-l N for the send side's post list")),
    row("aes_xts", ' ', "", "AES-XTS encryption", no(CRYPTO)),
    row("encrypt_on_tx", ' ', "", "encrypt on send", no(CRYPTO)),
    row("sig_before", ' ', "", "signature before encryption", no(CRYPTO)),
    row("aes_block_size", ' ', "512", "AES-XTS block size", no(CRYPTO)),
    row("kek_path", ' ', "kek.bin", "key encryption key file", no(CRYPTO)),
    row("credentials_path", ' ', "cred.bin", "credentials file", no(CRYPTO)),
    row("data_enc_keys_number", ' ', "1", "data encryption keys", no(CRYPTO)),
    row("data_enc_key_app_path", ' ', "app", "data encryption key app", no(CRYPTO)),
    row("log_dci_streams", ' ', "2", "DC initiator streams (log2)", no(DC)),
    row("log_active_dci_streams", ' ', "2", "active DC initiator streams (log2)", no(DC)),
    row("disable_pcie_relaxed", ' ', "", "no PCIe relaxed ordering", S),
    row("use_ooo", ' ', "", "out-of-order data placement", R("out-of-order placement is not asked for", NOT_SET)),
    row("congest_type", ' ', "DCQCN", "HNS congestion control algorithm", R("congestion control is the NIC's setting", "the NIC vendor's tools")),
    row("bind_source_ip", ' ', "10.0.0.1", "source IP of the control connection", R("the client's control connection takes the route's source", "--bind ADDR sets the server's listening address")),
    row("write_with_imm", ' ', "", "WRITE with immediate", R("WRITE with immediate is not measured", "write-bw, write-lat (plain WRITE)")),
    row("send_with_imm", ' ', "", "SEND with immediate", R("SEND with immediate is not measured", "send-bw, send-lat (plain SEND)")),
    row("no_enhanced_reorder", ' ', "", "no out-of-order receive consumption", R("out-of-order receives are not asked for", NOT_SET)),
    row("unsolicited_write", ' ', "", "SRD unsolicited write receive", R("the SRD transport is not offered", "-c RC, UC or UD")),
    row("connectionless", ' ', "", "a connectionless multicast server", no(MCAST)),
    row("cqe_poll", ' ', "16", "completions polled per call", R("rdmabench polls completions in its own batches", NOT_SET)),
    row("tph_mem", ' ', "pm", "PCIe TPH memory type", R("PCIe TLP processing hints are not offered", NOT_SET)),
    row("cpu_id", ' ', "0", "CPU of PCIe TPH steering", R("PCIe TLP processing hints are not offered", "--cpus LIST pins the measuring thread")),
    row("ph", ' ', "0", "PCIe TPH processing hint", R("PCIe TLP processing hints are not offered", NOT_SET)),
    row("disable_dynamic_polling", ' ', "", "no adaptive CQE polling", I("rdmabench's polling does not adapt: nothing to disable")),
    row("sig_offload", ' ', "", "T10-DIF signature offload", no(CRYPTO)),
    row("data_validation", ' ', "", "check the data received", A("--validate", "rdmabench checks the payload after each size")),
    row("data_validation_debug", ' ', "", "verbose data validation", R("--validate names the first wrong byte already", "--validate")),
    row("pin_cores", ' ', "0-3", "CPU affinity list", A("--cpus", "rdmabench pins its measuring thread to one CPU of the list")),
    row("numa_node", ' ', "0", "run on this NUMA node", R("the NIC's node's CPUs are the default", "--cpus LIST with that node's CPUs (/sys/devices/system/node/nodeN/cpulist)")),
    row("disable_numa", ' ', "", "no NUMA detection or binding", A("--no-pin", "")),
];

/// The row of perftest's long name `long`.
pub(crate) fn by_long(long: &str) -> Option<&'static PerftestName> {
    NAMES.iter().find(|n| n.long == long)
}

/// The row of perftest's short letter `c`.
pub(crate) fn by_short(c: char) -> Option<&'static PerftestName> {
    NAMES.iter().find(|n| n.short == Some(c))
}

impl PerftestName {
    /// True when rdmabench takes it (as it is, under another name, translated or ignored).
    pub(crate) fn accepted(&self) -> bool {
        !matches!(self.answer, Answer::Refused(..))
    }

    /// "--tos, -T" as the reference names it.
    pub(crate) fn spelled(&self) -> String {
        match self.short {
            Some(c) => format!("-{c}, --{}", self.long),
            None => format!("--{}", self.long),
        }
    }

    /// The answer and rdmabench's way, as the reference's two last columns say them.
    fn answer_cells(&self) -> (&'static str, String) {
        match self.answer {
            Answer::Same => ("accepted", format!("rdmabench's own --{}", self.long)),
            Answer::Alias(to, "") => ("accepted", format!("`{to}`")),
            Answer::Alias(to, note) => ("accepted", format!("`{to}` ({note})")),
            Answer::Translated(t) => {
                let (to, how) = t.describe();
                ("translated", format!("`{to}`: {how}"))
            }
            Answer::Ignored(why) => ("ignored", why.to_string()),
            Answer::Refused(why, instead) => ("refused", format!("{why}; instead: {instead}")),
        }
    }
}

/// The table for the options reference: every perftest option, rdmabench's answer and way.
pub(crate) fn reference_markdown() -> String {
    let accepted = NAMES.iter().filter(|n| n.accepted()).count();
    let mut out = format!(
        "Every option of perftest 6.29 ({} names, from the `long_options` table of its \
         `perftest_parameters.c`), answered: {accepted} accepted, {} refused with exit 2. \
         A perftest name rdmabench takes may be given as `--name value` or `--name=value`.\n\n\
         | perftest option | meaning in perftest | answer | rdmabench |\n|---|---|---|---|\n",
        NAMES.len(),
        NAMES.len() - accepted
    );
    for n in NAMES {
        let (answer, way) = n.answer_cells();
        let value = n.value.map(|_| " VALUE").unwrap_or_default();
        out.push_str(&format!(
            "| `{}{value}` | {} | {answer} | {} |\n",
            n.spelled(),
            n.meaning,
            way.replace('|', "\\|")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_letters_are_each_in_one_row() {
        for n in NAMES {
            assert_eq!(
                NAMES.iter().filter(|m| m.long == n.long).count(),
                1,
                "{}",
                n.long
            );
            assert!(
                by_long(n.long).is_some_and(|m| m.meaning == n.meaning),
                "{}",
                n.long
            );
            if let Some(c) = n.short {
                assert!(by_short(c).is_some_and(|m| m.long == n.long), "-{c}");
            }
        }
        // perftest 6.29's getopt string, its letters that take a value and those that do not.
        let with_value = "wypdimsntuSxcqIoMrQAlDfBTLEJjKkXW";
        let switches = "aFegzRvhbNVCHUOZP";
        for c in with_value.chars().chain(switches.chars()) {
            let row = by_short(c).unwrap_or_else(|| panic!("-{c} has no row"));
            assert_eq!(row.value.is_some(), with_value.contains(c), "-{c}");
        }
        let letters = NAMES.iter().filter(|n| n.short.is_some()).count();
        assert_eq!(letters, with_value.len() + switches.len());
        assert_eq!(NAMES.len(), 156);
    }

    #[test]
    fn the_reference_has_a_row_per_name_and_the_counts() {
        let md = reference_markdown();
        assert_eq!(
            md.lines().filter(|l| l.starts_with("| `")).count(),
            NAMES.len()
        );
        assert!(md.contains("| `-T, --tos VALUE` | TOS byte"), "{md}");
        assert!(md.contains("| `--rate_limit VALUE` | rate limit, Gb/s unless --rate_units | translated | `--rate-limit`: a bare number is Gb/s"));
        assert!(md.contains(
            "| `-e, --events` | sleep on CQ events instead of polling | refused | rdmabench polls"
        ));
        let accepted = NAMES.iter().filter(|n| n.accepted()).count();
        assert!(md.contains(&format!(
            "{accepted} accepted, {} refused",
            NAMES.len() - accepted
        )));
    }
}
