//! The test plan: every parameter of a run, validated together, and the server's rule for
//! adopting the client's plan (refuse only a value it was given explicitly that differs).
//! The plan's parameters, defaults, rules and adoption are one contract between the sides;
//! its tests are `plan/tests.rs`.

use serde::Serialize;
use std::fmt;

use crate::catalogue::{Agree, PARAMS};
pub use crate::catalogue::{PlanRequest, TestPlan};
pub use crate::kinds::{AtomicOp, Connection, Mode, Role, Stop, TestKind, Verb};
pub use crate::limits::*;
use crate::units::format_size;
pub use crate::usage::PlanError;

/// The sizes a server's `-s` or `-a` asks for, as [`TestPlan::sizes_text`] says them.
fn server_sizes(server: &PlanRequest, client: &TestPlan) -> Option<String> {
    if server.all {
        let sweep = TestPlan {
            sizes: crate::units::sweep_sizes(),
            ..client.clone()
        };
        return Some(sweep.sizes_text());
    }
    server.size.map(format_size)
}

/// A plan value as a message shows it: strings bare, nothing as "default".
pub fn shown(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "default".to_string(),
        other => other.to_string(),
    }
}

fn check_range<T: PartialOrd + fmt::Display>(
    flag: &str,
    v: T,
    lo: T,
    hi: T,
) -> Result<(), PlanError> {
    if v < lo || v > hi {
        return Err(PlanError::Value(format!(
            "{flag} {v} is out of range: valid values are {lo} to {hi}"
        )));
    }
    Ok(())
}

fn refuse(text: String) -> Result<(), PlanError> {
    Err(PlanError::Value(text))
}

/// `value` as JSON, as the wire and the catalogue's checks read it.
fn json_of<T: Serialize>(value: &T) -> Result<serde_json::Value, PlanError> {
    serde_json::to_value(value).map_err(|e| PlanError::Value(e.to_string()))
}

impl PlanRequest {
    /// Fills in defaults and checks every rule, all values together.
    pub fn resolve(&self, test: TestKind) -> Result<TestPlan, PlanError> {
        let plan = self.fill(test)?;
        plan.check()?;
        Ok(plan)
    }

    /// The plan with defaults where nothing was given, unchecked.
    fn fill(&self, test: TestKind) -> Result<TestPlan, PlanError> {
        let lat = test.mode == Mode::Lat;
        let sizes = if test.verb == Verb::Atomic {
            if self.all || self.size.is_some_and(|s| s != ATOMIC_SIZE) {
                let asked = if self.all {
                    "-a".to_string()
                } else {
                    format!("-s {}", self.size.unwrap_or(0))
                };
                return Err(PlanError::Value(format!(
                    "{test} moves {ATOMIC_SIZE} bytes per operation: {asked} is not possible; leave -s out or give -s 8"
                )));
            }
            vec![ATOMIC_SIZE]
        } else if self.all {
            crate::units::sweep_sizes()
        } else {
            vec![self.size.unwrap_or(if lat {
                DEFAULT_SIZE_LAT
            } else {
                DEFAULT_SIZE_BW
            })]
        };
        Ok(PlanRequest::planned(self, test, sizes))
    }
}

impl TestPlan {
    /// Checks the rules that hold whatever the device.
    pub fn check(&self) -> Result<(), PlanError> {
        for &s in &self.sizes {
            check_range("--size", s, 1, MAX_SIZE)?;
        }
        self.check_catalogue()?;
        if self.srq && self.validate {
            return refuse(
                "--srq with --validate is not possible: with a shared receive queue a message \
                 lands in whichever receive comes first, not in its QP's buffer, so its payload \
                 cannot be checked; leave one of them out"
                    .to_string(),
            );
        }
        if self.srq && self.qps > self.rx_depth {
            return refuse(format!(
                "--srq with --qps {} needs --rx-depth of at least {} (the shared queue holds \
                 -r receives for all QPs; it is {})",
                self.qps, self.qps, self.rx_depth
            ));
        }
        if let Some(r) = self.rate_limit {
            if !(r.is_finite() && r > 0.0 && r <= 1e4) {
                return refuse(format!(
                    "--rate-limit {r} is out of range: give GB/s, more than 0 and at most 10000"
                ));
            }
        }
        if let Some(d) = self.duration {
            if !(d.is_finite() && d > 0.0 && d <= 86_400.0) {
                return refuse(format!(
                    "--duration {d} is out of range: give seconds, more than 0 and at most 86400"
                ));
            }
        }
        self.check_interval()?;
        check_range("--post-list", self.post_list, 1, self.tx_depth)?;
        check_range("--cq-mod", self.cq_mod, 1, self.tx_depth)?;
        if let Some(m) = self.path_mtu {
            if !PATH_MTUS.contains(&m) {
                return refuse(format!(
                    "--mtu {m} is not a valid MTU: use 256, 512, 1024, 2048 or 4096"
                ));
            }
        }
        // Unsignaled requests hold send-queue slots until a later signaled one completes:
        // without room for a whole post list beyond cq_mod - 1 of them the loop would stall.
        if self.cq_mod + self.post_list - 1 > self.tx_depth {
            return refuse(format!(
                "--cq-mod {} with --post-list {} needs --tx-depth of at least {} (it is {}): \
                 lower --cq-mod or raise --tx-depth",
                self.cq_mod,
                self.post_list,
                self.cq_mod + self.post_list - 1,
                self.tx_depth
            ));
        }
        self.check_verb_and_transport()
    }

    /// `--interval`: within a `-D` window, at least [`MIN_INTERVAL`] seconds, and at most
    /// [`MAX_INTERVALS`] of them; one window (not `--repeat`'s medians of several).
    fn check_interval(&self) -> Result<(), PlanError> {
        let Some(i) = self.interval else {
            return Ok(());
        };
        let Some(d) = self.duration else {
            return refuse(format!(
                "--interval {i} cuts a -D run's window: add -D SECS (an iteration run has no \
                 planned length to cut)"
            ));
        };
        let window = Stop::for_duration(d)
            .window()
            .map_or(0.0, |w| w.as_secs_f64());
        if !(i.is_finite() && i >= MIN_INTERVAL && i <= window) {
            return refuse(format!(
                "--interval {i} is out of range: give seconds, at least {MIN_INTERVAL} and at \
                 most the measured window of -D {d} ({window:.3} s: a tenth, at most 2 s, is \
                 left out at each end)"
            ));
        }
        if window / i > MAX_INTERVALS as f64 {
            return refuse(format!(
                "--interval {i} cuts the {window:.3} s window of -D {d} into more than \
                 {MAX_INTERVALS} intervals: give at least {:.3}",
                window / MAX_INTERVALS as f64
            ));
        }
        if self.repeat > 1 {
            return refuse(format!(
                "--interval {i} follows one window over time; with --repeat {} the figures are \
                 medians of several windows: leave one of them out",
                self.repeat
            ));
        }
        Ok(())
    }

    /// The catalogue's rules for every planned parameter: a whole number within its range,
    /// and none given (a value other than its default) to a test it does not apply to.
    fn check_catalogue(&self) -> Result<(), PlanError> {
        let plan = json_of(self)?;
        let default = json_of(&PlanRequest::default().fill(self.test)?)?;
        for p in PARAMS.iter().filter(|p| p.agree == Agree::Plan) {
            let value = &plan[p.key];
            if let (Some((lo, hi)), Some(v)) = (p.range, value.as_u64()) {
                check_range(p.name(), v, lo, hi)?;
            }
            if *value != default[p.key] && !(p.applies.to)(self.test, self.connection) {
                let over = match self.connection {
                    Connection::Rc => String::new(),
                    other => format!(" over {}", other.name()),
                };
                // A switch is named alone ("--validate"), a value with its flag.
                let given = match value {
                    serde_json::Value::Bool(true) => String::new(),
                    other => format!(" {}", shown(other)),
                };
                return refuse(format!(
                    "{}{given} does not apply to {}{over}: {}",
                    p.name(),
                    self.test,
                    p.applies.why
                ));
            }
        }
        Ok(())
    }

    fn check_verb_and_transport(&self) -> Result<(), PlanError> {
        let test = self.test;
        match (self.connection, test.verb) {
            (Connection::Ud, Verb::Send) | (Connection::Uc, Verb::Write | Verb::Send) | (Connection::Rc, _) => {}
            (Connection::Ud, _) => {
                return refuse(format!(
                    "{test} is not possible over UD: UD carries SEND only (send-bw, send-lat); use -c RC"
                ))
            }
            (Connection::Uc, _) => {
                return refuse(format!(
                    "{test} is not possible over UC: UC carries WRITE and SEND only; use -c RC"
                ))
            }
        }
        if self.bidirectional && test.verb == Verb::Send && self.connection != Connection::Rc {
            return refuse(format!(
                "-b with {test} over {} is not supported: a lost message could not be told from a late \
                 one on both sides at once; use -c RC for bidirectional SEND",
                self.connection.name()
            ));
        }
        if let Some(o) = self.outs {
            // Above 1, the devices' own limit decides (at most 255, the QP attribute's 8
            // bits): it is named when they open (engine::check_outs).
            if o == 0 {
                return refuse(
                    "--outs 0 is out of range: valid values are 1 up to what the devices allow \
                     (a ConnectX allows 16); or leave it out to take what both devices allow"
                        .to_string(),
                );
            }
        }
        Ok(())
    }

    /// The largest message size in the plan.
    pub fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(0)
    }

    /// True when this side receives SENDs: the server in a SEND test, both with `-b`.
    pub fn receives(&self, role: Role) -> bool {
        self.test.verb == Verb::Send
            && (role == Role::Server || self.bidirectional || self.test.mode == Mode::Lat)
    }

    /// True when this side posts the test's operations: the client, both with `-b`.
    pub fn sends(&self, role: Role) -> bool {
        role == Role::Client || self.bidirectional
    }

    /// How the sizes read in a message: "64 KiB" or "a sweep (2 B .. 8 MiB)".
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
            return Err(PlanError::Value(format!(
                "plan mismatch: the server runs {server_test} but the client asked for {}",
                client.test
            )));
        }
        let mut diffs = Vec::new();
        if let Some(sizes) = server_sizes(server, &client) {
            if sizes != client.sizes_text() {
                diffs.push(format!(
                    "size: server {sizes}, client {}",
                    client.sizes_text()
                ));
            }
        }
        let given = json_of(server)?;
        let plan = json_of(&client)?;
        for p in PARAMS.iter().filter(|p| p.agree == Agree::Plan) {
            let value = &given[p.key];
            let explicit = !(value.is_null() || *value == serde_json::Value::Bool(false));
            if !explicit || plan[p.key] == *value {
                continue;
            }
            diffs.push(format!(
                "{}: server {}, client {}",
                p.name(),
                shown(value),
                shown(&plan[p.key])
            ));
        }
        if !diffs.is_empty() {
            return Err(PlanError::Value(format!(
                "plan mismatch ({}); give both sides the same values or leave them off the server",
                diffs.join("; ")
            )));
        }
        client.check()?;
        Ok(client)
    }
}

#[cfg(test)]
mod tests;
