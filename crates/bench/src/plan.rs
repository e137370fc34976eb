//! The test plan: every parameter of a run, validated together, and the server's rule for
//! adopting the client's plan (refuse only a value it was given explicitly that differs).

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::units::format_size;

/// The tests rdmabench runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TestKind {
    /// RDMA WRITE bandwidth.
    WriteBw,
}

impl fmt::Display for TestKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TestKind::WriteBw => "write-bw",
        })
    }
}

impl TestKind {
    /// The title perftest users know.
    pub fn title(self) -> &'static str {
        match self {
            TestKind::WriteBw => "RDMA_Write BW Test",
        }
    }
}

/// Everything both sides must agree on. The client's plan is the one that runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestPlan {
    /// Which test.
    pub test: TestKind,
    /// Message sizes in bytes, in the order they run.
    pub sizes: Vec<u64>,
    /// Operations per QP and size.
    pub iters: u64,
    /// Number of QPs.
    pub qps: u32,
    /// Operations in flight per QP.
    pub tx_depth: u32,
    /// Messages up to this many bytes are sent inline.
    pub inline: u32,
    /// Work requests per doorbell.
    pub post_list: u32,
    /// One completion is requested every this many work requests.
    pub cq_mod: u32,
    /// Check the payload after each size.
    pub validate: bool,
}

/// Default operations per QP and size (perftest's bandwidth default).
pub const DEFAULT_ITERS: u64 = 5000;
/// Default message size.
pub const DEFAULT_SIZE: u64 = 65536;
/// Default send queue depth (perftest's).
pub const DEFAULT_TX_DEPTH: u32 = 128;
/// Default completion moderation (perftest's).
pub const DEFAULT_CQ_MOD: u32 = 100;
/// Largest message size.
pub const MAX_SIZE: u64 = 1 << 31;
/// Largest number of QPs.
pub const MAX_QPS: u32 = 1024;

/// The values a side was given explicitly on its command line (`None`: not given).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanRequest {
    /// `-s`.
    pub size: Option<u64>,
    /// `-a`.
    pub all: bool,
    /// `-n`.
    pub iters: Option<u64>,
    /// `-q`.
    pub qps: Option<u32>,
    /// `-t`.
    pub tx_depth: Option<u32>,
    /// `-I`.
    pub inline: Option<u32>,
    /// `-l`.
    pub post_list: Option<u32>,
    /// `-Q`.
    pub cq_mod: Option<u32>,
    /// `--validate`.
    pub validate: bool,
}

/// A plan that breaks a rule; the message names the value and what would be valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

fn check_range<T: PartialOrd + fmt::Display>(
    flag: &str,
    v: T,
    lo: T,
    hi: T,
) -> Result<(), PlanError> {
    if v < lo || v > hi {
        return Err(PlanError(format!(
            "{flag} {v} is out of range: valid values are {lo}..={hi}"
        )));
    }
    Ok(())
}

impl PlanRequest {
    /// Fills in defaults and checks every rule, all values together.
    pub fn resolve(&self, test: TestKind) -> Result<TestPlan, PlanError> {
        let sizes = if self.all {
            crate::units::sweep_sizes()
        } else {
            vec![self.size.unwrap_or(DEFAULT_SIZE)]
        };
        let tx_depth = self.tx_depth.unwrap_or(DEFAULT_TX_DEPTH);
        let post_list = self.post_list.unwrap_or(1);
        let cq_mod = self.cq_mod.unwrap_or_else(|| {
            DEFAULT_CQ_MOD
                .min(tx_depth.saturating_sub(post_list) + 1)
                .max(1)
        });
        let plan = TestPlan {
            test,
            sizes,
            iters: self.iters.unwrap_or(DEFAULT_ITERS),
            qps: self.qps.unwrap_or(1),
            tx_depth,
            inline: self.inline.unwrap_or(0),
            post_list,
            cq_mod,
            validate: self.validate,
        };
        plan.check()?;
        Ok(plan)
    }
}

impl TestPlan {
    /// Checks the rules that hold whatever the device.
    pub fn check(&self) -> Result<(), PlanError> {
        for &s in &self.sizes {
            check_range("--size", s, 1, MAX_SIZE)?;
        }
        check_range("--iters", self.iters, 1, u64::from(u32::MAX))?;
        check_range("--qps", self.qps, 1, MAX_QPS)?;
        check_range("--tx-depth", self.tx_depth, 1, 1 << 16)?;
        check_range("--post-list", self.post_list, 1, self.tx_depth)?;
        check_range("--cq-mod", self.cq_mod, 1, self.tx_depth)?;
        check_range("--inline-size", self.inline, 0, 1 << 16)?;
        // Unsignaled requests hold send-queue slots until a later signaled one completes:
        // without room for a whole post list beyond cq_mod - 1 of them the loop would stall.
        if self.cq_mod + self.post_list - 1 > self.tx_depth {
            return Err(PlanError(format!(
                "--cq-mod {} with --post-list {} needs --tx-depth of at least {} (it is {}): \
                 lower --cq-mod or raise --tx-depth",
                self.cq_mod,
                self.post_list,
                self.cq_mod + self.post_list - 1,
                self.tx_depth
            )));
        }
        Ok(())
    }

    /// The largest message size in the plan.
    pub fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(0)
    }

    /// How the sizes read in a message: "64 KiB" or "-a (2 B .. 8 MiB)".
    pub fn sizes_text(&self) -> String {
        match self.sizes.as_slice() {
            [one] => format_size(*one),
            many => format!(
                "a sweep ({} .. {})",
                format_size(many.first().copied().unwrap_or(0)),
                format_size(self.max_size())
            ),
        }
    }

    /// The server's rule: adopt the client's plan unless a value the server was given
    /// explicitly differs; the error names both values.
    pub fn adopt(
        client: TestPlan,
        server_test: TestKind,
        server: &PlanRequest,
    ) -> Result<TestPlan, PlanError> {
        if client.test != server_test {
            return Err(PlanError(format!(
                "plan mismatch: the server runs {server_test} but the client asked for {}",
                client.test
            )));
        }
        let mut diffs = Vec::new();
        let mut differ = |flag: &str, server: Option<String>, client: String| {
            if let Some(s) = server {
                if s != client {
                    diffs.push(format!("{flag}: server {s}, client {client}"));
                }
            }
        };
        let client_sizes = client.sizes_text();
        let server_sizes = if server.all {
            Some(
                TestPlan {
                    sizes: crate::units::sweep_sizes(),
                    ..client.clone()
                }
                .sizes_text(),
            )
        } else {
            server.size.map(format_size)
        };
        differ("size", server_sizes, client_sizes);
        differ(
            "iters",
            server.iters.map(|v| v.to_string()),
            client.iters.to_string(),
        );
        differ(
            "qps",
            server.qps.map(|v| v.to_string()),
            client.qps.to_string(),
        );
        differ(
            "tx-depth",
            server.tx_depth.map(|v| v.to_string()),
            client.tx_depth.to_string(),
        );
        differ(
            "inline-size",
            server.inline.map(|v| v.to_string()),
            client.inline.to_string(),
        );
        differ(
            "post-list",
            server.post_list.map(|v| v.to_string()),
            client.post_list.to_string(),
        );
        differ(
            "cq-mod",
            server.cq_mod.map(|v| v.to_string()),
            client.cq_mod.to_string(),
        );
        differ(
            "validate",
            server.validate.then(|| "on".to_string()),
            if client.validate { "on" } else { "off" }.to_string(),
        );
        if !diffs.is_empty() {
            return Err(PlanError(format!(
                "plan mismatch ({}); give both sides the same values or leave them off the server",
                diffs.join("; ")
            )));
        }
        client.check()?;
        Ok(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> PlanRequest {
        PlanRequest::default()
    }

    #[test]
    fn defaults_are_perftests() {
        let plan = request().resolve(TestKind::WriteBw).unwrap();
        assert_eq!(plan.sizes, vec![65536]);
        assert_eq!(
            (plan.iters, plan.qps, plan.tx_depth, plan.cq_mod),
            (5000, 1, 128, 100)
        );
    }

    #[test]
    fn cq_mod_default_shrinks_to_fit_a_small_tx_depth() {
        let plan = PlanRequest {
            tx_depth: Some(16),
            post_list: Some(4),
            ..request()
        }
        .resolve(TestKind::WriteBw)
        .unwrap();
        assert_eq!(plan.cq_mod, 13);
    }

    #[test]
    fn a_stalling_combination_is_refused_with_the_numbers() {
        let err = PlanRequest {
            tx_depth: Some(128),
            cq_mod: Some(100),
            post_list: Some(64),
            ..request()
        }
        .resolve(TestKind::WriteBw)
        .unwrap_err();
        assert!(
            err.0.contains("at least 163") && err.0.contains("128"),
            "{err}"
        );
    }

    #[test]
    fn out_of_range_values_name_the_flag_and_the_range() {
        let err = PlanRequest {
            qps: Some(0),
            ..request()
        }
        .resolve(TestKind::WriteBw)
        .unwrap_err();
        assert_eq!(err.0, "--qps 0 is out of range: valid values are 1..=1024");
        let err = PlanRequest {
            size: Some(0),
            ..request()
        }
        .resolve(TestKind::WriteBw)
        .unwrap_err();
        assert!(err.0.starts_with("--size 0"), "{err}");
    }

    #[test]
    fn server_adopts_what_it_was_not_given() {
        let client = PlanRequest {
            size: Some(4096),
            qps: Some(4),
            ..request()
        }
        .resolve(TestKind::WriteBw)
        .unwrap();
        let adopted = TestPlan::adopt(client.clone(), TestKind::WriteBw, &request()).unwrap();
        assert_eq!(adopted, client);
    }

    #[test]
    fn server_refuses_a_differing_explicit_value_naming_both() {
        let client = PlanRequest {
            size: Some(4096),
            ..request()
        }
        .resolve(TestKind::WriteBw)
        .unwrap();
        let server = PlanRequest {
            size: Some(65536),
            ..request()
        };
        let err = TestPlan::adopt(client, TestKind::WriteBw, &server).unwrap_err();
        assert!(
            err.0.contains("server 64 KiB") && err.0.contains("client 4 KiB"),
            "{err}"
        );
    }

    #[test]
    fn an_equal_explicit_value_is_fine() {
        let client = PlanRequest {
            qps: Some(4),
            ..request()
        }
        .resolve(TestKind::WriteBw)
        .unwrap();
        let server = PlanRequest {
            qps: Some(4),
            ..request()
        };
        assert!(TestPlan::adopt(client, TestKind::WriteBw, &server).is_ok());
    }
}
