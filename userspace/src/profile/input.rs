//! Reading a profile file back (`report`, `validate`), within bounds.
//!
//! In: a path some user named, holding JSON or gzip-compressed JSON. Out:
//! a reader of its JSON bytes as they are inflated ([`ProfileReader`]), or
//! one line saying why not. The file must be a regular file (a FIFO or a
//! device would never end). A gzip stream is inflated through a counting
//! limit: at most [`MIN_INFLATED`] or [`MAX_RATIO`] times the compressed
//! size, whichever is more. Profiles sysprof writes compress 6 to 10 times,
//! so the limit never stops one, while a gzip bomb (which inflates a
//! thousand times) is refused after at most that many bytes. The JSON text
//! is never held whole (a 100-MiB profile is a gigabyte of it): whoever
//! parses it keeps what it needs. Errors are [`ReadError`], each one line.
//! [`read_threads`] parses the top-level object for both readers, handing
//! each thread to a [`ThreadSink`] as it is parsed.

use std::path::Path;

/// Inflated bytes always allowed, whatever the compressed size.
pub const MIN_INFLATED: u64 = 64 << 20;

/// Inflated bytes allowed per compressed byte past [`MIN_INFLATED`].
pub const MAX_RATIO: u64 = 64;

/// Why a profile could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Not opened: missing, unreadable, or not a regular file (the
    /// message names the path).
    #[error("{0}")]
    Open(#[from] crate::binaries::OpenError),
    /// Opened, but reading failed.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path, escaped.
        path: String,
        /// What reading said.
        #[source]
        source: std::io::Error,
    },
    /// It starts as gzip but does not inflate.
    #[error("{path} is not gzip ({source})")]
    NotGzip {
        /// The path, escaped.
        path: String,
        /// What inflating said.
        #[source]
        source: std::io::Error,
    },
    /// It inflates past [`inflated_limit`]: a gzip bomb, or a profile
    /// that must be given uncompressed.
    #[error("{path} inflates past {} MiB ({MAX_RATIO} times its {} KiB), far more than a profile compresses; if it is one, gunzip it and give the .json", limit >> 20, compressed >> 10)]
    TooLarge {
        /// The path, escaped.
        path: String,
        /// The most it could inflate to, bytes.
        limit: u64,
        /// Its size, bytes.
        compressed: usize,
    },
}

impl ReadError {
    /// Whether the message already says what to do next (otherwise the
    /// caller says which profile to give).
    pub fn says_what_to_do(&self) -> bool {
        matches!(self, ReadError::NotGzip { .. } | ReadError::TooLarge { .. })
    }
}

/// A profile read as it is inflated (`validate`, `report`): its JSON
/// bytes, never more than [`inflated_limit`] of them, so whatever parses
/// them holds what it keeps and not the file. Give it to serde by value in
/// a `BufReader` (serde reads a byte at a time, which only a `BufReader` it
/// owns serves from its buffer: through `&mut` it took twice as long), and
/// keep its [`ProfileReader::watch`] to ask what a parse error was.
pub struct ProfileReader {
    source: Source,
    inflated: u64,
    watch: ReadWatch,
}

enum Source {
    Plain(std::io::BufReader<std::fs::File>),
    Gz(flate2::read::MultiGzDecoder<std::io::BufReader<std::fs::File>>),
}

impl std::io::Read for ProfileReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = match &mut self.source {
            Source::Plain(r) => r.read(buf)?,
            Source::Gz(r) => r.read(buf)?,
        };
        self.inflated += n as u64;
        if self.watch.gz && self.inflated > self.watch.limit {
            self.watch.over.set(true);
            return Err(std::io::Error::other("the profile inflates past its limit"));
        }
        Ok(n)
    }
}

impl ProfileReader {
    /// What tells a parse error from the file apart from one in its JSON,
    /// kept while the reader is parsed.
    pub fn watch(&self) -> ReadWatch {
        self.watch.clone()
    }
}

/// A [`ProfileReader`]'s state, seen from outside while it is parsed.
#[derive(Clone)]
pub struct ReadWatch {
    gz: bool,
    limit: u64,
    compressed: u64,
    over: std::rc::Rc<std::cell::Cell<bool>>,
    shown: String,
}

impl ReadWatch {
    /// What a parse error is, if it came from the file (it inflates past
    /// the limit, or is not gzip) rather than from its JSON.
    pub fn error(&self, e: &serde_json::Error) -> Option<ReadError> {
        if self.over.get() {
            return Some(ReadError::TooLarge {
                path: self.shown.clone(),
                limit: self.limit,
                compressed: self.compressed as usize,
            });
        }
        if self.gz && e.is_io() {
            return Some(ReadError::NotGzip {
                path: self.shown.clone(),
                source: std::io::Error::other(e.to_string()),
            });
        }
        None
    }
}

/// Open the profile at `path` to read as it is inflated (gzip by its magic).
pub fn open_profile(path: &Path) -> Result<ProfileReader, ReadError> {
    use std::io::BufRead;
    let shown = crate::escape::path(path);
    // Not a FIFO or a device: a read must end.
    let file = crate::binaries::open_regular(&path.to_string_lossy(), true)?;
    let compressed = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut file = std::io::BufReader::with_capacity(1 << 16, file);
    let head = file.fill_buf().map_err(|source| ReadError::Read {
        path: shown.clone(),
        source,
    })?;
    let gz = head.starts_with(&[0x1f, 0x8b]);
    let source = if gz {
        Source::Gz(flate2::read::MultiGzDecoder::new(file))
    } else {
        Source::Plain(file)
    };
    let watch = ReadWatch {
        gz,
        limit: inflated_limit(compressed),
        compressed,
        over: Default::default(),
        shown,
    };
    Ok(ProfileReader {
        source,
        inflated: 0,
        watch,
    })
}

/// The most a gzip file of `compressed` bytes may inflate to.
pub fn inflated_limit(compressed: u64) -> u64 {
    MIN_INFLATED.max(compressed.saturating_mul(MAX_RATIO))
}

/// Who is handed a profile's threads as they are parsed ([`read_threads`]):
/// `validate` checks any shape (a [`serde_json::Value`] each), `report`
/// reads the writer's own types. One thread is held at a time.
pub trait ThreadSink {
    /// A thread as this reader parses it.
    type Thread: serde::de::DeserializeOwned;
    /// One thread, parsed; false stops the parse with an error.
    fn thread(&mut self, thread: Self::Thread) -> bool;
    /// Whether the top-level `key` is wanted whole (then handed to
    /// [`ThreadSink::kept`] where it is met); the rest are skipped unbuilt.
    fn keeps(&self, _key: &str) -> bool {
        false
    }
    /// A top-level value [`ThreadSink::keeps`] asked for.
    fn kept(&mut self, _key: &str, _value: serde_json::Value) {}
    /// Whether `counters` is streamed to [`ThreadSink::counter`], each
    /// element summarized as it is parsed (never built whole: a file any
    /// user wrote can hold millions).
    fn streams_counters(&self) -> bool {
        false
    }
    /// One counter of `counters`, summarized; None when `counters` is not
    /// an array.
    fn counter(&mut self, _counter: Option<CounterSummary>) {}
}

/// A counter as [`ThreadSink::counter`] gets it: what its cross-references
/// need, gathered as it is parsed (its columns counted, not kept).
#[derive(Debug, Default, Clone)]
pub struct CounterSummary {
    /// It was an object.
    pub object: bool,
    /// Its name, when a string (cut to 100 characters).
    pub name: Option<String>,
    /// Its pid, when a string (cut to 64 characters).
    pub pid: Option<String>,
    /// `mainThreadIndex`, when a non-negative integer.
    pub main_thread: Option<u64>,
    /// `samples.length`, when a non-negative integer.
    pub length: Option<u64>,
    /// How many elements `samples.time` has, when an array.
    pub time_len: Option<u64>,
    /// How many elements `samples.count` has, when an array.
    pub count_len: Option<u64>,
}

impl<'de> serde::Deserialize<'de> for CounterSummary {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CounterVisitor { samples: false })
    }
}

/// A counter object (or, with `samples`, its `samples` object) summarized.
struct CounterVisitor {
    samples: bool,
}

impl<'de> serde::de::DeserializeSeed<'de> for CounterVisitor {
    type Value = CounterSummary;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<CounterSummary, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for CounterVisitor {
    type Value = CounterSummary;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a counter")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> Result<CounterSummary, A::Error> {
        let mut c = CounterSummary {
            object: true,
            ..Default::default()
        };
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match (self.samples, &*key) {
                (false, "name") => c.name = map.next_value::<Small>()?.text(100),
                (false, "pid") => c.pid = map.next_value::<Small>()?.text(64),
                (false, "mainThreadIndex") => c.main_thread = map.next_value::<Small>()?.index(),
                (false, "samples") => {
                    let s = map.next_value_seed(CounterVisitor { samples: true })?;
                    (c.length, c.time_len, c.count_len) = (s.length, s.time_len, s.count_len);
                }
                (true, "length") => c.length = map.next_value::<Small>()?.index(),
                (true, "time") => c.time_len = map.next_value::<Small>()?.elements(),
                (true, "count") => c.count_len = map.next_value::<Small>()?.elements(),
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(c)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> Result<CounterSummary, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(CounterSummary::default())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<CounterSummary, E> {
        Ok(CounterSummary::default())
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<CounterSummary, E> {
        Ok(CounterSummary::default())
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<CounterSummary, E> {
        Ok(CounterSummary::default())
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<CounterSummary, E> {
        Ok(CounterSummary::default())
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<CounterSummary, E> {
        Ok(CounterSummary::default())
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<CounterSummary, E> {
        Ok(CounterSummary::default())
    }
}

/// A counter's field as far as it is checked: a string (kept, cut), an
/// integer, an array (its elements counted), or anything else.
enum Small {
    Text(String),
    Integer(i64),
    Elements(u64),
    Other,
}

impl Small {
    fn text(self, max: usize) -> Option<String> {
        match self {
            Small::Text(t) => Some(t.chars().take(max).collect()),
            _ => None,
        }
    }
    fn index(self) -> Option<u64> {
        match self {
            Small::Integer(i) if i >= 0 => Some(i as u64),
            _ => None,
        }
    }
    fn elements(self) -> Option<u64> {
        match self {
            Small::Elements(n) => Some(n),
            _ => None,
        }
    }
}

impl<'de> serde::Deserialize<'de> for Small {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Small;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a value")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Small, E> {
                // Cut here: a string of megabytes is not held.
                Ok(Small::Text(s.chars().take(200).collect()))
            }
            fn visit_i64<E: serde::de::Error>(self, x: i64) -> Result<Small, E> {
                Ok(Small::Integer(x))
            }
            fn visit_u64<E: serde::de::Error>(self, x: u64) -> Result<Small, E> {
                Ok(i64::try_from(x).map_or(Small::Other, Small::Integer))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Small, E> {
                Ok(Small::Other)
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Small, E> {
                Ok(Small::Other)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Small, E> {
                Ok(Small::Other)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Small, A::Error> {
                let mut n = 0;
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Small::Elements(n))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Small, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Small::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// `counters`: each element summarized and handed over.
struct EachCounter<'a, S>(&'a mut S);

impl<'de, S: ThreadSink> serde::de::DeserializeSeed<'de> for EachCounter<'_, S> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, S: ThreadSink> serde::de::Visitor<'de> for EachCounter<'_, S> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("the counters array")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(c) = seq.next_element::<CounterSummary>()? {
            self.0.counter(Some(c));
        }
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        self.0.counter(None);
        Ok(())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.0.counter(None);
        Ok(())
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.0.counter(None);
        Ok(())
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.0.counter(None);
        Ok(())
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.0.counter(None);
        Ok(())
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.0.counter(None);
        Ok(())
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        self.0.counter(None);
        Ok(())
    }
}

/// What [`read_threads`] found of `threads` itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ThreadsShape {
    /// No `threads` key.
    #[default]
    Missing,
    /// An array, each element handed over.
    Array,
    /// Something else (skipped).
    NotArray,
}

/// Parse a processed profile's top-level object from `deserializer`,
/// handing each element of `threads` to `sink` as it is parsed and the
/// values it keeps where they are met (sysprof writes `meta` and `libs`
/// after the threads; other writers may not).
pub fn read_threads<'de, D: serde::Deserializer<'de>, S: ThreadSink>(
    deserializer: D,
    sink: &mut S,
) -> Result<ThreadsShape, D::Error> {
    serde::de::DeserializeSeed::deserialize(TopLevel(sink), deserializer)
}

/// The top-level object: `threads` streamed, kept keys built, the rest skipped.
struct TopLevel<'a, S>(&'a mut S);

impl<'de, S: ThreadSink> serde::de::DeserializeSeed<'de> for TopLevel<'_, S> {
    type Value = ThreadsShape;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<ThreadsShape, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, S: ThreadSink> serde::de::Visitor<'de> for TopLevel<'_, S> {
    type Value = ThreadsShape;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a processed profile (an object)")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<ThreadsShape, A::Error> {
        let mut shape = ThreadsShape::Missing;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "threads" {
                shape = map.next_value_seed(EachThread(&mut *self.0))?;
            } else if key == "counters" && self.0.streams_counters() {
                map.next_value_seed(EachCounter(&mut *self.0))?;
            } else if self.0.keeps(&key) {
                let value = map.next_value()?;
                self.0.kept(&key, value);
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(shape)
    }
}

/// The visitor methods for every scalar JSON value (null, a bool, a
/// number, a string), each giving `$value`: what a visitor that expects a
/// container says when it meets a scalar instead. One definition for the
/// streamed readers here and in the validator.
macro_rules! scalars_give {
    ($ty:ty, $value:expr) => {
        fn visit_unit<E: serde::de::Error>(self) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<$ty, E> {
            Ok($value)
        }
    };
}
pub(crate) use scalars_give;

/// `threads`: each element parsed, handed over and dropped before the next;
/// anything but an array skipped and said.
struct EachThread<'a, S>(&'a mut S);

impl<'de, S: ThreadSink> serde::de::DeserializeSeed<'de> for EachThread<'_, S> {
    type Value = ThreadsShape;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<ThreadsShape, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, S: ThreadSink> serde::de::Visitor<'de> for EachThread<'_, S> {
    type Value = ThreadsShape;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("the threads array")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<ThreadsShape, A::Error> {
        while let Some(t) = seq.next_element::<S::Thread>()? {
            if !self.0.thread(t) {
                return Err(serde::de::Error::custom("a thread its reader refused"));
            }
        }
        Ok(ThreadsShape::Array)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<ThreadsShape, A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(ThreadsShape::NotArray)
    }

    scalars_give!(ThreadsShape, ThreadsShape::NotArray);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parse `path` as `report` does; the error as `ReadError` when it is the file's.
    fn read_profile(path: &Path) -> Result<serde_json::Value, ReadError> {
        let reader = open_profile(path)?;
        let watch = reader.watch();
        let parsed = serde_json::from_reader(std::io::BufReader::new(reader));
        parsed.map_err(|e| watch.error(&e).expect("the file's error, not the JSON's"))
    }

    /// Check that threads are handed over one by one in order, kept keys
    /// arrive whole wherever they stand, others are skipped, and a
    /// `threads` that is no array is said, not an error.
    #[test]
    fn threads_stream_to_the_sink_and_kept_keys_are_built() {
        #[derive(Default)]
        struct Names(Vec<String>, Vec<(String, serde_json::Value)>);
        impl ThreadSink for Names {
            type Thread = serde_json::Value;
            fn thread(&mut self, t: serde_json::Value) -> bool {
                self.0.push(t["name"].as_str().unwrap_or("?").to_string());
                t["name"] != "stop"
            }
            fn keeps(&self, key: &str) -> bool {
                key == "meta"
            }
            fn kept(&mut self, key: &str, value: serde_json::Value) {
                self.1.push((key.to_string(), value));
            }
        }
        let read = |text: &str| {
            let mut names = Names::default();
            let shape = read_threads(&mut serde_json::Deserializer::from_str(text), &mut names)
                .map_err(|e| e.to_string());
            (shape, names.0, names.1)
        };
        let (shape, threads, kept) =
            read(r#"{"libs":[1],"threads":[{"name":"a"},{"name":"b"}],"meta":{"v":1}}"#);
        assert_eq!(shape, Ok(ThreadsShape::Array));
        assert_eq!(threads, ["a", "b"]);
        assert_eq!(kept, [("meta".to_string(), serde_json::json!({"v": 1}))]);
        assert_eq!(
            read(r#"{"threads":{"name":"a"}}"#).0,
            Ok(ThreadsShape::NotArray)
        );
        assert_eq!(read(r#"{"threads":7}"#).0, Ok(ThreadsShape::NotArray));
        assert_eq!(read(r#"{"meta":{}}"#).0, Ok(ThreadsShape::Missing));
        let (stopped, threads, _) = read(r#"{"threads":[{"name":"stop"},{"name":"never"}]}"#);
        assert!(
            stopped.is_err() && threads == ["stop"],
            "{stopped:?} {threads:?}"
        );
    }

    /// Check that a gzip bomb (100 MiB of spaces in 100 KiB: a 1 MiB gzip
    /// member repeated, as gzip allows) is refused with one line naming the
    /// limit.
    #[test]
    fn a_gzip_bomb_is_refused_at_the_limit() {
        let dir = std::env::temp_dir().join(format!("sysprof-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bomb.json.gz");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut enc, &vec![b' '; 1 << 20]).unwrap();
        let member = enc.finish().unwrap();
        std::fs::write(&path, member.repeat(100)).unwrap();
        let e = read_profile(&path).unwrap_err().to_string();
        assert!(
            e.contains("inflates past 64 MiB") && !e.contains('\n'),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Check that a real-sized profile's ratio is far inside the limit.
    #[test]
    fn the_limit_grows_with_the_file() {
        assert_eq!(inflated_limit(1000), MIN_INFLATED);
        assert_eq!(inflated_limit(10 << 20), 640 << 20);
    }

    /// Check that a file with gzip's magic that does not inflate, and a
    /// missing file, are refused with one line naming the file, and that
    /// only the first already says what to do.
    #[test]
    fn broken_gzip_and_missing_files_are_one_line_each() {
        let dir = std::env::temp_dir().join(format!("sysprof-input-broken-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("broken.json.gz");
        std::fs::write(&path, [0x1f, 0x8b, 0, 1, 2, 3]).unwrap();
        let e = read_profile(&path).unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("{} is not gzip (", path.display()))
                && e.says_what_to_do(),
            "{e}"
        );
        let e = read_profile(&dir.join("missing.json")).unwrap_err();
        assert!(
            e.to_string().contains("missing.json")
                && !e.to_string().contains('\n')
                && !e.says_what_to_do(),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
