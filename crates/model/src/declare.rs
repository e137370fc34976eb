//! The macro that turns the parameter table (`catalogue.rs`) into the types every layer
//! uses: one entry per parameter, and from it the command line's request
//! ([`PlanRequest`](crate::plan::PlanRequest), clap), the wire's plan
//! ([`TestPlan`](crate::plan::TestPlan)) and its defaults, the record's field
//! ([`ParamsRecord`](crate::record::ParamsRecord)) and its value from the plan, and the
//! catalogue's row ([`PARAMS`](crate::catalogue::PARAMS)): how the header, the CSV and
//! `compare` show it. The table's order is every output's order.
//!
//! An entry:
//!
//! ```text
//! key: Agree { row fields of catalogue::Param (flag, perftest, applies, range, label, ...) }
//! request #[doc, arg attributes] (request type => plan type = the plan's value)   // planned only
//! record #[doc, serde attributes] (record type = the record's value from the plan)
//! ```
//!
//! The request and plan values are expressions over the names the table's first lines give
//! (the request, the test, the sizes, and each planned parameter filled before it); the
//! record's over the plan's name. What a side or the run finds (a side's memory, the clock)
//! has a record value the run then writes.

use serde::{Deserialize, Deserializer};

/// The wire's rule for every plan field: present, `None` included (an `Option` is read with
/// its own `deserialize`, which has no default), so a peer that does not know a parameter
/// refuses a plan that has it, naming it.
pub fn required<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    T::deserialize(d)
}

/// `value`: what the table's macro writes where a planned field's type must appear.
pub fn typed<T>(value: T) -> T {
    value
}

/// A record value as the header, the CSV and `compare` show it: `None` where it does not
/// apply; a fraction as JSON writes it.
pub trait Shown {
    /// The value as text.
    fn shown(&self) -> Option<String>;
}

macro_rules! shown_as_text {
    ($($t:ty),*) => { $(impl Shown for $t {
        fn shown(&self) -> Option<String> { Some(self.to_string()) }
    })* };
}
shown_as_text!(String, bool, u8, u16, u32, u64);

impl Shown for f64 {
    fn shown(&self) -> Option<String> {
        Some(serde_json::Value::from(*self).to_string())
    }
}

impl<T: Shown> Shown for Option<T> {
    fn shown(&self) -> Option<String> {
        self.as_ref().and_then(Shown::shown)
    }
}

/// Declares the parameters: see the module's documentation.
macro_rules! params {
    (
        fill($req:ident, $test:ident, $sizes:ident);
        record($plan:ident);
        request_first { $($first:tt)* }
        $(
            $key:ident: $agree:ident { $($row:ident: $row_value:expr),* $(,)? }
            $( request $(#[$request_attr:meta])* ($request_ty:ty => $plan_ty:ty = $fill:expr) )?
            record $(#[$record_attr:meta])* ($record_ty:ty = $from:expr)
        )*
    ) => {
        /// The test parameters as a side's command line gave them (`None`, `false`: not
        /// given): each is declared once in the table of `catalogue.rs`, flattened into every
        /// test's arguments, sent to no one (the client sends the resolved [`TestPlan`]) and
        /// compared by name with the client's plan when a server adopts it.
        #[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Serialize)]
        pub struct PlanRequest {
            $($first)*
            $($( $(#[$request_attr])* pub $key: $request_ty, )?)*
        }

        /// Everything both sides must agree on; the client's plan is the one that runs. Each
        /// field but the test and its sizes is a planned parameter of the table in
        /// `catalogue.rs`, where it is documented.
        ///
        /// It is the wire's plan message, and the wire is strict by construction: an unknown
        /// field is refused (`deny_unknown_fields`), and so is a missing one, optional ones
        /// included ([`required`](crate::declare::required)), so a peer that does not know a
        /// parameter refuses a plan that has it, naming it.
        #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct TestPlan {
            /// Which test.
            pub test: TestKind,
            /// Message sizes in bytes, in the order they run.
            pub sizes: Vec<u64>,
            $($(
                #[serde(deserialize_with = "crate::declare::required")]
                pub $key: $plan_ty,
            )?)*
        }

        impl PlanRequest {
            /// The plan of `test` at `sizes`, each parameter as given or its default.
            pub(crate) fn planned($req: &PlanRequest, $test: TestKind, $sizes: Vec<u64>) -> TestPlan {
                $($( let $key: $plan_ty = $fill; )?)*
                TestPlan { test: $test, sizes: $sizes, $($( $key: crate::declare::typed::<$plan_ty>($key), )?)* }
            }
        }

        /// The test's parameters as the loops ran them (the effective values: see
        /// `results/schema.md`); `catalogue::PARAMS` is how each shows and compares.
        #[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
        pub struct ParamsRecord {
            $( $(#[$record_attr])* pub $key: $record_ty, )*
        }

        impl ParamsRecord {
            /// The record of `plan` before it runs: each planned value as the plan has it
            /// (connecting then writes what the devices settled), what a side or the run finds
            /// empty.
            pub fn planned($plan: &TestPlan) -> ParamsRecord {
                ParamsRecord { $( $key: $from, )* }
            }
        }

        /// Every parameter, in the order the header, the CSV and the record show them.
        pub const PARAMS: &[Param] = &[
            $(Param {
                key: stringify!($key),
                agree: Agree::$agree,
                $($row: $row_value,)*
                value: |p| crate::declare::Shown::shown(&p.$key),
                ..PLANNED
            },)*
        ];
    };
}
pub(crate) use params;
