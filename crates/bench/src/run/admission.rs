//! What a server lets one client's plan take: `--max-mem`, `--max-qps`, `--max-duration`.
//!
//! The plan is checked once the server adopted it and before anything is allocated; a refusal
//! names the limit and the value asked, and goes to the client as the reason of its `Reject`.
//! The memory asked is the engine's own [`Footprint`], so what is checked is what would be
//! allocated. A run timed with `-D` is checked in full up front; any run is also ended between
//! sizes once it has gone on longer than `--max-duration`, and inside a size (its deadlines
//! end there, plus `--timeout`).

use std::time::Duration;

use crate::engine::buffer::Footprint;
use crate::engine::Local;
use crate::plan::{TestPlan, MAX_QPS};
use crate::units::{format_size_approx, parse_size};

/// `--max-duration`'s default, in seconds.
pub(crate) const DEFAULT_MAX_DURATION: f64 = 3600.0;

/// The server's limits on one run.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct Admission {
    /// Server: refuse a plan whose buffers need more than SIZE
    ///
    /// Server: refuse a plan whose buffers need more than SIZE of host memory, or of GPU
    /// memory [default: half of this machine's memory; for GPU memory, half of the GPU's]
    #[arg(long, value_name = "SIZE", value_parser = parse_size, conflicts_with = "server")]
    pub max_mem: Option<u64>,

    /// Server: refuse a plan of more than N QPs
    #[arg(long, value_name = "N", default_value_t = MAX_QPS, conflicts_with = "server",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_QPS)))]
    pub max_qps: u32,

    /// Server: refuse a plan timed to run longer than SECS
    ///
    /// Server: refuse a plan timed (-D) to run longer than SECS in all (-D x sizes x
    /// --repeat), and end any run that has gone on longer (between sizes, and within a size
    /// once its time is up)
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_MAX_DURATION,
          value_parser = parse_seconds, conflicts_with = "server")]
    pub max_duration: f64,
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            max_mem: None,
            max_qps: MAX_QPS,
            max_duration: DEFAULT_MAX_DURATION,
        }
    }
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    match crate::units::parse_secs(text) {
        Ok(v) if v > 0.0 => Ok(v),
        _ => Err(format!(
            "'{text}' is not a duration: give seconds, more than 0"
        )),
    }
}

/// A plan this server's limits refuse; the text names the limit and the value asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the server refused the plan: {0}")]
pub struct Refused(pub String);

/// The most memory of one kind a run may take, and where that figure comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cap {
    /// Bytes.
    pub bytes: u64,
    /// How the refusal names it: "--max-mem 1 GiB", "limit of 7.8 GiB (half of ...)".
    pub name: String,
}

/// The memory caps in force: `None` where neither `--max-mem` nor the machine says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemCaps {
    /// Host memory.
    pub host: Option<Cap>,
    /// GPU memory.
    pub gpu: Option<Cap>,
}

impl Admission {
    /// The caps: `--max-mem` for both kinds, else half of this machine's memory (`host_total`)
    /// and half of its GPU's (`gpu_total`), where known.
    pub fn caps(&self, host_total: Option<u64>, gpu_total: Option<u64>) -> MemCaps {
        let half = |total: u64, of: &str| Cap {
            bytes: total / 2,
            name: format!(
                "limit of {} (half of {of} {}; --max-mem sets it)",
                format_size_approx(total / 2),
                format_size_approx(total)
            ),
        };
        match self.max_mem {
            Some(bytes) => {
                let cap = Cap {
                    bytes,
                    name: format!("--max-mem {}", format_size_approx(bytes)),
                };
                MemCaps {
                    host: Some(cap.clone()),
                    gpu: Some(cap),
                }
            }
            None => MemCaps {
                host: host_total.map(|t| half(t, "its memory,")),
                gpu: gpu_total.map(|t| half(t, "its GPU's memory,")),
            },
        }
    }

    /// Checks `plan`, whose buffers take `need` on this side, against the limits.
    pub fn check(&self, plan: &TestPlan, need: &Footprint, caps: &MemCaps) -> Result<(), Refused> {
        if plan.qps > self.max_qps {
            return Err(Refused(format!(
                "--qps {} is above this server's --max-qps {}",
                plan.qps, self.max_qps
            )));
        }
        if let Some(secs) = plan.duration {
            let (sizes, repeat) = (plan.sizes.len(), plan.repeat);
            let total = secs * sizes as f64 * f64::from(repeat);
            if total > self.max_duration {
                return Err(Refused(format!(
                    "-D {secs} s x {sizes} size(s) x --repeat {repeat} = {total} s is above this \
                     server's --max-duration {} s",
                    self.max_duration
                )));
            }
        }
        let qps = format!("{} QP{}", need.qps, if need.qps == 1 { "" } else { "s" });
        let payload = format!("{qps} x {}", format_size_approx(need.slot));
        let buffers = match need.bounce {
            Some(b) if need.on_gpu => {
                format!("{qps} x {} of bounce buffers", format_size_approx(b.stride))
            }
            _ => payload.clone(),
        };
        let host_detail = format!(
            "{buffers}, and {} of queues",
            format_size_approx(need.queues)
        );
        check_mem(
            "host memory",
            need.host_bytes(),
            &host_detail,
            caps.host.as_ref(),
        )?;
        check_mem("GPU memory", need.gpu_bytes(), &payload, caps.gpu.as_ref())
    }

    /// What is left of `--max-duration` after `elapsed` (zero once it is spent): a size's
    /// deadlines end there, so a run that never ends a size is ended inside it too.
    pub(crate) fn time_left(&self, elapsed: Duration) -> Duration {
        Duration::try_from_secs_f64(self.max_duration)
            .unwrap_or(Duration::MAX)
            .saturating_sub(elapsed)
    }

    /// Refuses to go on with a run that has lasted `elapsed`, beyond `--max-duration`.
    pub(crate) fn check_elapsed(&self, elapsed: Duration) -> Result<(), Refused> {
        if elapsed.as_secs_f64() > self.max_duration {
            return Err(Refused(format!(
                "the run has gone on for {:.0} s, beyond this server's --max-duration {} s",
                elapsed.as_secs_f64(),
                self.max_duration
            )));
        }
        Ok(())
    }
}

fn check_mem(kind: &str, bytes: u64, detail: &str, cap: Option<&Cap>) -> Result<(), Refused> {
    match cap {
        Some(cap) if bytes > cap.bytes => Err(Refused(format!(
            "the client's plan needs {} of {kind} ({detail}), above this server's {}",
            format_size_approx(bytes),
            cap.name
        ))),
        _ => Ok(()),
    }
}

/// Checks `plan` against the server's limits on `local`'s memory, before anything is
/// allocated.
pub(crate) fn admit_plan(
    admission: &Admission,
    plan: &TestPlan,
    local: &Local,
) -> Result<(), Refused> {
    let need = local
        .footprint(plan)
        .map_err(|e| Refused(format!("{e:#}")))?;
    let caps = admission.caps(host_memory(), local.gpu_memory());
    admission.check(plan, &need, &caps)
}

/// This machine's memory (`MemTotal` of /proc/meminfo), when it can be read.
pub(crate) fn host_memory() -> Option<u64> {
    mem_total(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// `MemTotal` of a /proc/meminfo text, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line.split_whitespace().skip(1);
    let n: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => n.checked_mul(1024),
        None => Some(n),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemMode;
    use crate::plan::{Mode, PlanRequest, TestKind, Verb};

    fn plan(request: PlanRequest) -> TestPlan {
        request
            .resolve(TestKind::new(Verb::Write, Mode::Bw))
            .unwrap()
    }

    fn need(plan: &TestPlan, mem: &str) -> Footprint {
        let mem = MemMode::parse(mem).unwrap();
        Footprint::new(plan, &mem, accel::StagingConfig::default()).unwrap()
    }

    fn refusal(admission: &Admission, plan: &TestPlan, mem: &str, caps: &MemCaps) -> String {
        let err = admission.check(plan, &need(plan, mem), caps).unwrap_err();
        err.to_string()
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn a_plan_above_max_mem_is_refused_naming_both_figures() {
        let p = plan(PlanRequest {
            size: Some(GIB),
            qps: Some(4),
            ..Default::default()
        });
        let admission = Admission {
            max_mem: Some(GIB),
            ..Default::default()
        };
        let caps = admission.caps(Some(64 * GIB), None);
        let text = refusal(&admission, &p, "host", &caps);
        assert_eq!(
            text,
            "the server refused the plan: the client's plan needs 8.0 GiB of host memory \
             (4 QPs x 2 GiB, and 416 KiB of queues), above this server's --max-mem 1 GiB"
        );
        let text = refusal(&admission, &p, "cuda:0", &caps);
        assert!(text.contains("8 GiB of GPU memory"), "{text}");
        let small = plan(PlanRequest::default());
        assert!(admission
            .check(&small, &need(&small, "host"), &caps)
            .is_ok());
    }

    #[test]
    fn the_default_memory_cap_is_half_the_machines() {
        let p = plan(PlanRequest {
            size: Some(GIB),
            qps: Some(8),
            ..Default::default()
        });
        let admission = Admission::default();
        let caps = admission.caps(Some(16_400_000_000), Some(80 * GIB));
        let text = refusal(&admission, &p, "host", &caps);
        assert!(
            text.contains("16.0 GiB of host memory")
                && text.contains("limit of 7.6 GiB (half of its memory, 15.3 GiB; --max-mem"),
            "{text}"
        );
        // 16 GiB of GPU memory fits half of an 80 GiB GPU.
        assert!(admission.check(&p, &need(&p, "cuda:0"), &caps).is_ok());
        // Where the machine's memory is unknown, only --max-mem caps it.
        let unknown = admission.caps(None, None);
        assert!(admission.check(&p, &need(&p, "host"), &unknown).is_ok());
    }

    #[test]
    fn a_staged_plan_counts_its_bounce_buffers_as_host_memory() {
        let p = plan(PlanRequest {
            qps: Some(64),
            ..Default::default()
        });
        let admission = Admission {
            max_mem: Some(128 << 20),
            ..Default::default()
        };
        let caps = admission.caps(None, None);
        let text = refusal(&admission, &p, "cuda-staged", &caps);
        assert!(
            text.contains(
                "262.5 MiB of host memory (64 QPs x 4 MiB of bounce buffers, and 6.5 MiB of \
                 queues)"
            ),
            "{text}"
        );
    }

    #[test]
    fn qps_and_timed_length_are_capped() {
        let admission = Admission {
            max_qps: 16,
            max_duration: 60.0,
            ..Default::default()
        };
        let caps = admission.caps(None, None);
        let many = plan(PlanRequest {
            qps: Some(64),
            ..Default::default()
        });
        let text = refusal(&admission, &many, "host", &caps);
        assert!(
            text.ends_with("--qps 64 is above this server's --max-qps 16"),
            "{text}"
        );
        let long = plan(PlanRequest {
            all: true,
            duration: Some(5.0),
            ..Default::default()
        });
        let text = refusal(&admission, &long, "host", &caps);
        assert!(
            text.contains("-D 5 s x 23 size(s) x --repeat 1 = 115 s is above this server's --max-duration 60 s"),
            "{text}"
        );
        let day = plan(PlanRequest {
            duration: Some(86_400.0),
            ..Default::default()
        });
        let text = refusal(&Admission::default(), &day, "host", &caps);
        assert!(
            text.contains("86400 s is above this server's --max-duration 3600 s"),
            "{text}"
        );
        let err = admission
            .check_elapsed(Duration::from_secs(61))
            .unwrap_err();
        assert!(err.to_string().contains("gone on for 61 s"), "{err}");
        assert!(admission.check_elapsed(Duration::from_secs(59)).is_ok());
        assert_eq!(
            admission.time_left(Duration::from_secs(59)),
            Duration::from_secs(1)
        );
        assert_eq!(admission.time_left(Duration::from_secs(61)), Duration::ZERO);
    }

    #[test]
    fn mem_total_reads_proc_meminfo() {
        let text = "MemTotal:       16302084 kB\nMemFree:         1234 kB\n";
        assert_eq!(mem_total(text), Some(16_302_084 * 1024));
        assert_eq!(mem_total("MemFree: 5 kB\n"), None);
        assert_eq!(mem_total("MemTotal: lots kB\n"), None);
    }
}
