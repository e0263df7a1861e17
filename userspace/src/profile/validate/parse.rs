//! Parsing a thread into its summary: each table the checks read, each
//! column of it element by element, anything else skipped unbuilt.
//!
//! In: a thread's JSON from a deserializer (a reader's or a value's), of
//! any shape. Out: its [`ThreadSummary`]; no element is held, and a key
//! given twice counts as its last.

use serde_json::Value;

use super::summary::{wanted_columns, ColumnSummary, TableSummary, ThreadSummary, TABLES};

impl<'de> serde::Deserialize<'de> for ThreadSummary {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ThreadVisitor)
    }
}

struct ThreadVisitor;

impl<'de> serde::de::Visitor<'de> for ThreadVisitor {
    type Value = ThreadSummary;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a thread")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> Result<ThreadSummary, A::Error> {
        let mut t = ThreadSummary {
            object: true,
            name_shown: "null".into(),
            tables: TABLES.iter().map(|_| None).collect(),
            ..Default::default()
        };
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match &*key {
                "name" | "pid" | "processName" | "tid" => {
                    let v: Scalar = map.next_value()?;
                    match &*key {
                        "name" => {
                            t.name_string = matches!(v, Scalar::Str(_));
                            t.name_shown = v.shown();
                        }
                        "pid" => {
                            t.pid_string = matches!(v, Scalar::Str(_));
                            if let Scalar::Str(pid) = &v {
                                t.pid = Some(pid.chars().take(64).collect());
                            }
                        }
                        "processName" => t.process_name_string = matches!(v, Scalar::Str(_)),
                        _ => t.tid_number = matches!(v, Scalar::Number),
                    }
                }
                "stringArray" => {
                    let mut c = ColumnSummary::default();
                    t.strings = if map.next_value_seed(ColumnSeed(&mut c))? {
                        c.len
                    } else {
                        0
                    };
                }
                table if TABLES.iter().any(|(n, _)| *n == table) => {
                    let i = TABLES
                        .iter()
                        .position(|(n, _)| *n == table)
                        .expect("a table of TABLES");
                    t.tables[i] = Some(map.next_value_seed(TableSeed(i))?);
                }
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(t)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> Result<ThreadSummary, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(ThreadSummary::default())
    }

    crate::profile::input::scalars_give!(ThreadSummary, ThreadSummary::default());
}

/// A thread's scalar field: a string (kept to be shown, cut), a number, or
/// anything else (skipped).
enum Scalar {
    Str(String),
    Number,
    Other,
}

impl Scalar {
    /// As the problem names the thread: JSON, as `Value` shows it.
    fn shown(&self) -> String {
        match self {
            Scalar::Str(s) => Value::String(s.chars().take(200).collect()).to_string(),
            Scalar::Number => "a number".into(),
            Scalar::Other => "null".into(),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a value")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Scalar, E> {
                Ok(Scalar::Str(s.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Scalar, E> {
                Ok(Scalar::Number)
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Scalar, E> {
                Ok(Scalar::Number)
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Scalar, E> {
                Ok(Scalar::Number)
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Scalar, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Scalar, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Scalar::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// A table object (of [`TABLES`]' index): `length` and each wanted column
/// that is an array, summarized.
struct TableSeed(usize);

impl<'de> serde::de::DeserializeSeed<'de> for TableSeed {
    type Value = TableSummary;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<TableSummary, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for TableSeed {
    type Value = TableSummary;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a table")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<TableSummary, A::Error> {
        let mut t = TableSummary {
            length: None,
            columns: wanted_columns(self.0).map(|_| None).collect(),
        };
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "length" {
                let mut c = ColumnSummary::default();
                let v = map.next_value_seed(ElementSeed(&mut c))?;
                t.length = v.filter(|&x| x >= 0).map(|x| x as u64);
            } else if let Some(j) = wanted_columns(self.0).position(|c| c == key) {
                let mut c = ColumnSummary::default();
                t.columns[j] = map.next_value_seed(ColumnSeed(&mut c))?.then_some(c);
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(t)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<TableSummary, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(TableSummary::default())
    }

    crate::profile::input::scalars_give!(TableSummary, TableSummary::default());
}

/// A column: true when it is an array, each element summarized.
struct ColumnSeed<'a>(&'a mut ColumnSummary);

impl<'de> serde::de::DeserializeSeed<'de> for ColumnSeed<'_> {
    type Value = bool;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ColumnSeed<'_> {
    type Value = bool;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a column")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element_seed(ElementSeed(&mut *self.0))?.is_some() {
            self.0.len += 1;
        }
        Ok(true)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(false)
    }

    crate::profile::input::scalars_give!(bool, false);
}

/// One element of a column, added to its summary (at position `len`, which
/// the caller then advances); returns it when it is an integer.
struct ElementSeed<'a>(&'a mut ColumnSummary);

impl<'de> serde::de::DeserializeSeed<'de> for ElementSeed<'_> {
    type Value = Option<i64>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<i64>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ElementSeed<'_> {
    type Value = Option<i64>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a column's element")
    }

    fn visit_i64<E: serde::de::Error>(self, x: i64) -> Result<Option<i64>, E> {
        self.0.integer(x);
        Ok(Some(x))
    }

    fn visit_u64<E: serde::de::Error>(self, x: u64) -> Result<Option<i64>, E> {
        match i64::try_from(x) {
            Ok(x) => self.visit_i64(x),
            Err(_) => {
                self.0.number(x as f64);
                self.0.other(|| x.to_string());
                Ok(None)
            }
        }
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Option<i64>, E> {
        self.0.number(v);
        self.0.other(|| Value::from(v).to_string());
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Option<i64>, E> {
        if self.0.first_null.is_none() {
            self.0.first_null = Some(self.0.len);
        }
        Ok(None)
    }

    fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Option<i64>, E> {
        self.0.other(|| b.to_string());
        Ok(None)
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Option<i64>, E> {
        self.0
            .other(|| Value::String(s.chars().take(100).collect()).to_string());
        Ok(None)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Option<i64>, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        self.0.other(|| "an array".into());
        Ok(None)
    }

    /// An object: a marker's payload, whose `cause.stack` (the stack the
    /// front end draws in its tooltip and sidebar) is kept to be checked.
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Option<i64>, A::Error> {
        let at = self.0.len;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key != "cause" {
                map.next_value::<serde::de::IgnoredAny>()?;
                continue;
            }
            let cause: Value = map.next_value()?;
            let Some(stack) = cause.get("stack") else {
                continue;
            };
            match stack.as_i64().filter(|&x| x >= 0) {
                Some(x) if self.0.max_cause_stack.is_none_or(|(_, m)| x > m) => {
                    self.0.max_cause_stack = Some((at, x));
                }
                None if !stack.is_null() && self.0.first_bad_cause_stack.is_none() => {
                    let shown: String = stack.to_string().chars().take(100).collect();
                    self.0.first_bad_cause_stack = Some((at, shown));
                }
                _ => {}
            }
        }
        self.0.other(|| "an object".into());
        Ok(None)
    }
}
