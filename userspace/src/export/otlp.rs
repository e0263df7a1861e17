//! OTLP profiles: a window as an `ExportProfilesServiceRequest` of the
//! `v1development` profiles signal, sent over gRPC (gzip) with tonic.
//!
//! In: a [`Recording`] and the host's [`Labels`]. Out: one request holding
//! one `ResourceProfiles` per process (OpenTelemetry semantic conventions:
//! `host.name`, `process.pid`, `process.executable.name`/`.path`,
//! `process.command_line`, `container.id`, `service.name`), each with two
//! profiles: on-CPU samples (`samples`/`count`, period one sampling
//! interval of `cpu`/`nanoseconds`, every sample's timestamp kept, which
//! pprof cannot) and off-CPU time (`off_cpu`/`nanoseconds`, one value and
//! timestamp per interval). Sample attributes: `thread.name`, `thread.id`,
//! `cpu.logical_number`, and a Go goroutine's pprof labels under the keys its
//! program gave them and its id under `goroutine` (an integer; its labels
//! and id frames are no locations); each location's `profile.frame.type` (`native`,
//! `kernel`, `cpython`, and for JIT code `jvm` or `v8js` by its process). One dictionary for the whole request, deduplicated
//! (index 0 of every table is its zero value, as the protocol requires).
//! The messages and the client are the `opentelemetry-proto` crate's.

use opentelemetry_proto::tonic::collector::profiles::v1development::profiles_service_client::ProfilesServiceClient;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::profiles::v1development as pb;
use opentelemetry_proto::tonic::resource::v1::Resource;
use rustc_hash::FxHashMap;

use super::{CgroupIdentity, ExportError, Labels, SendError};
use crate::model::recording::{ProcessRecord, Recording, NO_LIB};
use crate::model::stack_tree::NO_PARENT;

/// Interns everything a request's dictionary holds.
struct Dictionary {
    d: pb::ProfilesDictionary,
    strings: FxHashMap<String, i32>,
    functions: FxHashMap<(i32, i32, i64), i32>,
    mappings: FxHashMap<u32, i32>,
    locations: FxHashMap<u32, i32>,
    stacks: FxHashMap<Vec<i32>, i32>,
    attributes: FxHashMap<(i32, AttrValue), i32>,
    /// Go goroutines' labels and ids: the attributes of each labels frame
    /// and goroutine frame met together, by the frames' indexes in the
    /// recording (`NO_FRAME` for none; the set's index in `label_sets`).
    label_sets: Vec<Vec<i32>>,
    label_set_of_frame: FxHashMap<(u32, u32), i32>,
}

/// No frame, in a key of [`Dictionary::label_set_of_frame`].
const NO_FRAME: u32 = u32::MAX;

#[derive(Clone, PartialEq, Eq, Hash)]
enum AttrValue {
    Str(String),
    Int(i64),
}

impl Dictionary {
    fn new() -> Dictionary {
        let d = pb::ProfilesDictionary {
            mapping_table: vec![Default::default()],
            location_table: vec![Default::default()],
            function_table: vec![Default::default()],
            link_table: vec![Default::default()],
            string_table: vec![String::new()],
            attribute_table: vec![Default::default()],
            stack_table: vec![Default::default()],
        };
        let mut strings = FxHashMap::default();
        strings.insert(String::new(), 0);
        Dictionary {
            d,
            strings,
            functions: FxHashMap::default(),
            mappings: FxHashMap::default(),
            locations: FxHashMap::default(),
            stacks: FxHashMap::default(),
            attributes: FxHashMap::default(),
            label_sets: Vec::new(),
            label_set_of_frame: FxHashMap::default(),
        }
    }

    fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.d.string_table.len() as i32;
        self.d.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn attribute(&mut self, key: &str, value: AttrValue) -> i32 {
        let k = self.string(key);
        if let Some(&i) = self.attributes.get(&(k, value.clone())) {
            return i;
        }
        let i = self.d.attribute_table.len() as i32;
        self.d.attribute_table.push(pb::KeyValueAndUnit {
            key_strindex: k,
            value: Some(any(&value)),
            unit_strindex: 0,
        });
        self.attributes.insert((k, value), i);
        i
    }

    /// `jit`: the frame type of JIT code in the process the stack is of
    /// (see [`jit_frame_type`]).
    fn location(&mut self, rec: &Recording, f: u32, jit: Option<&'static str>) -> i32 {
        if let Some(&i) = self.locations.get(&f) {
            return i;
        }
        let frame = &rec.frames[f as usize];
        let mapping_index = if frame.lib == NO_LIB || frame.is_pseudo() {
            0
        } else if let Some(&m) = self.mappings.get(&frame.lib) {
            m
        } else {
            let lib = &rec.libs[frame.lib as usize];
            let filename_strindex = self.string(&lib.path);
            let attribute_indices = match &lib.build_id {
                Some(id) => vec![self.attribute(
                    "process.executable.build_id.gnu",
                    AttrValue::Str(id.iter().map(|b| format!("{b:02x}")).collect()),
                )],
                None => Vec::new(),
            };
            let m = self.d.mapping_table.len() as i32;
            self.d.mapping_table.push(pb::Mapping {
                memory_start: 0,
                memory_limit: 0,
                file_offset: 0,
                filename_strindex,
                attribute_indices,
            });
            self.mappings.insert(frame.lib, m);
            m
        };
        // Innermost first: the last line is the caller the others were inlined into.
        let lines = frame
            .symbols
            .funcs
            .iter()
            .rev()
            .map(|fa| {
                let name = self.string(&fa.name);
                let file = self.string(fa.file.as_deref().unwrap_or(""));
                // A Python function is also told apart by its first line.
                let start_line = fa.start_line.unwrap_or(0) as i64;
                let function_index = match self.functions.get(&(name, file, start_line)) {
                    Some(&i) => i,
                    None => {
                        let i = self.d.function_table.len() as i32;
                        self.d.function_table.push(pb::Function {
                            name_strindex: name,
                            system_name_strindex: name,
                            filename_strindex: file,
                            start_line,
                        });
                        self.functions.insert((name, file, start_line), i);
                        i
                    }
                };
                pb::Line {
                    function_index,
                    line: fa.line.unwrap_or(0) as i64,
                    column: 0,
                }
            })
            .collect();
        let i = self.d.location_table.len() as i32;
        // The frame's kind, as the OTel semantic conventions name it.
        let kind = if frame.is_pseudo() {
            None
        } else if frame.is_kernel() {
            Some("kernel")
        } else if frame.is_java() {
            Some("jvm")
        } else if frame.is_interpreted_javascript() {
            Some("v8js")
        } else if frame.kind == crate::model::recording::FrameKind::Php {
            Some("php")
        } else if frame.kind == crate::model::recording::FrameKind::Perl {
            Some("perl")
        } else if frame.kind == crate::model::recording::FrameKind::Ruby {
            Some("ruby")
        } else if frame.is_interpreted() {
            Some("cpython")
        } else if let Some(kind) = jit.filter(|_| {
            rec.libs
                .get(frame.lib as usize)
                .is_some_and(|l| l.name.starts_with("JIT ("))
        }) {
            Some(kind)
        } else {
            Some("native")
        };
        let attribute_indices = kind
            .map(|k| vec![self.attribute("profile.frame.type", AttrValue::Str(k.to_string()))])
            .unwrap_or_default();
        self.d.location_table.push(pb::Location {
            mapping_index,
            address: if frame.is_pseudo() { 0 } else { frame.address },
            lines,
            attribute_indices,
        });
        self.locations.insert(f, i);
        i
    }

    /// The stack of node `node`, leaf first, of a process whose JIT code
    /// is of frame type `jit`, and the set of attributes its Go goroutine's
    /// labels are (a labels frame is no location; NO_ATTRIBUTE for none).
    fn stack(&mut self, rec: &Recording, node: u32, jit: Option<&'static str>) -> (i32, i32) {
        use crate::model::recording::FrameKind;
        let mut locs = Vec::new();
        let (mut labels, mut goroutine) = (NO_FRAME, NO_FRAME);
        let mut n = node;
        while n != NO_PARENT {
            let f = rec.stacks.key(n) as u32;
            match rec.frames[f as usize].kind {
                FrameKind::GoLabels => labels = f,
                FrameKind::Goroutine => goroutine = f,
                _ => locs.push(self.location(rec, f, jit)),
            }
            n = rec.stacks.parent(n);
        }
        (self.stack_of(locs), self.label_set(rec, labels, goroutine))
    }

    /// The attribute set of a Go goroutine's labels frame and goroutine
    /// frame (`NO_FRAME` for none), made the first time; NO_ATTRIBUTE for
    /// neither.
    fn label_set(&mut self, rec: &Recording, labels: u32, goroutine: u32) -> i32 {
        if (labels, goroutine) == (NO_FRAME, NO_FRAME) {
            return NO_ATTRIBUTE;
        }
        if let Some(&set) = self.label_set_of_frame.get(&(labels, goroutine)) {
            return set;
        }
        let frame = |f: u32| rec.frames.get(f as usize);
        let mut attrs: Vec<i32> = frame(labels)
            .and_then(super::pprof::go_labels)
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| self.attribute(&k, AttrValue::Str(v)))
            .collect();
        if let Some(id) =
            frame(goroutine).and_then(crate::model::goroutine_labels::goroutine_of_frame)
        {
            attrs.push(self.attribute(super::pprof::GOROUTINE_LABEL, AttrValue::Int(id as i64)));
        }
        let set = self.label_sets.len() as i32;
        self.label_sets.push(attrs);
        self.label_set_of_frame.insert((labels, goroutine), set);
        set
    }

    /// The index of the stack of locations `locs` (leaf first), made the first time.
    fn stack_of(&mut self, locs: Vec<i32>) -> i32 {
        if let Some(&i) = self.stacks.get(&locs) {
            return i;
        }
        let i = self.d.stack_table.len() as i32;
        self.d.stack_table.push(pb::Stack {
            location_indices: locs.clone(),
        });
        self.stacks.insert(locs, i);
        i
    }
}

/// The frame type of a process's JIT code (its perf map's or jitdump's
/// frames, and `[JIT] …` regions), as the OTel semantic conventions name
/// it: `jvm` for a JVM (HotSpot's compiled methods, interpreter and stubs),
/// `v8js` for node; None (native) for any other JIT. A JIT library belongs
/// to one process, so its frames are typed by that process.
fn jit_frame_type(p: &ProcessRecord) -> Option<&'static str> {
    let exe = p
        .exe
        .as_deref()
        .and_then(|e| e.rsplit('/').next())
        .unwrap_or(&p.name);
    match exe {
        "java" => Some("jvm"),
        "node" | "nodejs" => Some("v8js"),
        _ => None,
    }
}

fn any(v: &AttrValue) -> AnyValue {
    AnyValue {
        value: Some(match v {
            AttrValue::Str(s) => any_value::Value::StringValue(s.clone()),
            AttrValue::Int(i) => any_value::Value::IntValue(*i),
        }),
    }
}

fn kv(key: &str, v: AttrValue) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(any(&v)),
        key_strindex: 0,
    }
}

/// Wall-clock ns of a recording time.
fn wall_ns(rec: &Recording, t: u64) -> u64 {
    // The offset in integer ns: an f64 of ns since 1970 has a 256 ns step.
    let start = (rec.start_wall_ms * 1e6).max(0.0) as u64;
    start.saturating_add_signed(t as i64 - rec.start_ns as i64)
}

fn resource(p: &ProcessRecord, labels: &Labels) -> Resource {
    let mut attributes = vec![kv("host.name", AttrValue::Str(labels.host_name.clone()))];
    // A folded track (a compacted run's brief processes) has no pid of its own.
    if p.folded == 0 {
        attributes.push(kv("process.pid", AttrValue::Int(p.pid as i64)));
    }
    attributes.push(kv(
        "process.executable.name",
        AttrValue::Str(p.base_name().to_string()),
    ));
    attributes.push(kv("service.name", AttrValue::Str(super::service_name(p))));
    if let Some(exe) = &p.exe {
        attributes.push(kv("process.executable.path", AttrValue::Str(exe.clone())));
    }
    if !p.cmdline.is_empty() {
        attributes.push(kv(
            "process.command_line",
            AttrValue::Str(p.cmdline.clone()),
        ));
    }
    if let Some(CgroupIdentity::Container(id)) = super::cgroup_identity(p) {
        attributes.push(kv("container.id", AttrValue::Str(id)));
    }
    Resource {
        attributes,
        dropped_attributes_count: 0,
        entity_refs: Vec::new(),
    }
}

/// A sample's stack index and attribute indices (NO_ATTRIBUTE for none):
/// the thread's name and id, the CPU, and the set of its goroutine's labels.
type SampleKey = (i32, [i32; 4]);
/// Off-CPU samples of one key: their timestamps and durations.
type OffCpuValues = (Vec<u64>, Vec<i64>);
const NO_ATTRIBUTE: i32 = -1;

fn attribute_list(attrs: [i32; 4], label_sets: &[Vec<i32>]) -> Vec<i32> {
    let mut list: Vec<i32> = attrs[..3]
        .iter()
        .copied()
        .filter(|&a| a != NO_ATTRIBUTE)
        .collect();
    if let Some(set) = usize::try_from(attrs[3])
        .ok()
        .and_then(|s| label_sets.get(s))
    {
        list.extend_from_slice(set);
    }
    list
}

/// `rec` as one OTLP profiles request.
pub fn build(rec: &Recording, labels: &Labels) -> ExportProfilesServiceRequest {
    let mut dict = Dictionary::new();
    let shape = ProfileShape::new(&mut dict, rec);
    let scope = InstrumentationScope {
        name: "sysprof".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        attributes: Vec::new(),
        dropped_attributes_count: 0,
    };
    let mut resource_profiles = Vec::new();
    for p in &rec.processes {
        let (on, off) = group_samples(&mut dict, rec, p);
        if on.is_empty() && off.is_empty() {
            continue;
        }
        resource_profiles.push(pb::ResourceProfiles {
            resource: Some(resource(p, labels)),
            scope_profiles: vec![pb::ScopeProfiles {
                scope: Some(scope.clone()),
                profiles: shape.profiles(on, off, &dict.label_sets),
                schema_url: String::new(),
            }],
            schema_url: "https://opentelemetry.io/schemas/1.38.0".into(),
        });
    }
    ExportProfilesServiceRequest {
        resource_profiles,
        dictionary: Some(dict.d),
    }
}

/// Process `p`'s on-CPU timestamps and off-CPU intervals, grouped by
/// (stack, attributes); the attributes are the thread's name and id and
/// the CPU (NO_ATTRIBUTE when unknown), a fixed-size key so grouping
/// allocates nothing per sample.
fn group_samples(
    dict: &mut Dictionary,
    rec: &Recording,
    p: &ProcessRecord,
) -> (
    FxHashMap<SampleKey, Vec<u64>>,
    FxHashMap<SampleKey, OffCpuValues>,
) {
    let mut on: FxHashMap<SampleKey, Vec<u64>> = FxHashMap::default();
    let mut off: FxHashMap<SampleKey, OffCpuValues> = FxHashMap::default();
    let jit = jit_frame_type(p);
    for t in &p.threads {
        let tname = dict.attribute("thread.name", AttrValue::Str(t.name.clone()));
        let tid = dict.attribute("thread.id", AttrValue::Int(t.tid as i64));
        let s = &t.samples;
        for i in 0..s.time_ns.len() {
            let (stack, labels) = dict.stack(rec, s.stack[i], jit);
            let cpu = s.cpu.get(i).map_or(NO_ATTRIBUTE, |&cpu| {
                dict.attribute("cpu.logical_number", AttrValue::Int(cpu as i64))
            });
            on.entry((stack, [tname, tid, cpu, labels]))
                .or_default()
                .push(wall_ns(rec, s.time_ns[i]));
        }
        let o = &t.off_cpu;
        for i in 0..o.time_ns.len() {
            let (stack, labels) = dict.stack(rec, o.stack[i], jit);
            let e = off
                .entry((stack, [tname, tid, NO_ATTRIBUTE, labels]))
                .or_default();
            e.0.push(wall_ns(rec, o.time_ns[i]));
            e.1.push(o.duration_ns[i] as i64);
        }
    }
    (on, off)
}

/// Samples in the order of (stack, attributes).
fn sorted(mut m: Vec<pb::Sample>) -> Vec<pb::Sample> {
    m.sort_by(|a, b| {
        (a.stack_index, &a.attribute_indices).cmp(&(b.stack_index, &b.attribute_indices))
    });
    m
}

/// What the profiles of a request share: their value types, period and span.
struct ProfileShape {
    samples_type: pb::ValueType,
    cpu_type: pb::ValueType,
    off_cpu_type: pb::ValueType,
    period: i64,
    time_unix_nano: u64,
    duration_nano: u64,
}

impl ProfileShape {
    fn new(dict: &mut Dictionary, rec: &Recording) -> ProfileShape {
        let samples_type = pb::ValueType {
            type_strindex: dict.string("samples"),
            unit_strindex: dict.string("count"),
        };
        let cpu_type = pb::ValueType {
            type_strindex: dict.string("cpu"),
            unit_strindex: dict.string("nanoseconds"),
        };
        let off_cpu_type = pb::ValueType {
            type_strindex: dict.string("off_cpu"),
            unit_strindex: dict.string("nanoseconds"),
        };
        ProfileShape {
            samples_type,
            cpu_type,
            off_cpu_type,
            period: (rec.interval_ms * 1e6).round() as i64,
            time_unix_nano: (rec.start_wall_ms * 1e6).max(0.0) as u64,
            duration_nano: rec.end_ns.saturating_sub(rec.start_ns),
        }
    }

    /// A process's profiles: on-CPU samples, then off-CPU time (each only
    /// when it has some).
    fn profiles(
        &self,
        on: FxHashMap<SampleKey, Vec<u64>>,
        off: FxHashMap<SampleKey, OffCpuValues>,
        label_sets: &[Vec<i32>],
    ) -> Vec<pb::Profile> {
        let mut profiles = Vec::new();
        if !on.is_empty() {
            profiles.push(self.on_cpu(on, label_sets));
        }
        if !off.is_empty() {
            profiles.push(self.off_cpu(off, label_sets));
        }
        profiles
    }

    fn on_cpu(&self, on: FxHashMap<SampleKey, Vec<u64>>, label_sets: &[Vec<i32>]) -> pb::Profile {
        let samples = on
            .into_iter()
            .map(|((stack_index, attrs), mut ts)| {
                ts.sort_unstable();
                let attribute_indices = attribute_list(attrs, label_sets);
                // One timestamp per sample; the value (a count of one each) is implied.
                pb::Sample {
                    stack_index,
                    attribute_indices,
                    link_index: 0,
                    values: Vec::new(),
                    timestamps_unix_nano: ts,
                }
            })
            .collect();
        pb::Profile {
            sample_type: Some(self.samples_type),
            samples: sorted(samples),
            time_unix_nano: self.time_unix_nano,
            duration_nano: self.duration_nano,
            period_type: Some(self.cpu_type),
            period: self.period,
            ..Default::default()
        }
    }

    fn off_cpu(
        &self,
        off: FxHashMap<SampleKey, OffCpuValues>,
        label_sets: &[Vec<i32>],
    ) -> pb::Profile {
        let samples = off
            .into_iter()
            .map(|((stack_index, attrs), (ts, values))| pb::Sample {
                stack_index,
                attribute_indices: attribute_list(attrs, label_sets),
                link_index: 0,
                values,
                timestamps_unix_nano: ts,
            })
            .collect();
        pb::Profile {
            sample_type: Some(self.off_cpu_type),
            samples: sorted(samples),
            time_unix_nano: self.time_unix_nano,
            duration_nano: self.duration_nano,
            period_type: Some(self.off_cpu_type),
            period: 1,
            ..Default::default()
        }
    }
}

/// A connection to an OTLP endpoint (made on first use, remade after an error).
pub struct OtlpClient {
    endpoint: String,
    ca: Option<Vec<u8>>,
    headers: Vec<(
        tonic::metadata::AsciiMetadataKey,
        tonic::metadata::AsciiMetadataValue,
    )>,
    runtime: tokio::runtime::Runtime,
    client: Option<ProfilesServiceClient<tonic::transport::Channel>>,
    labels: Labels,
}

/// How long one request may take before it is given up (and retried later).
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl OtlpClient {
    /// A client for `endpoint` (`http://` or `https://`), with `ca` (PEM)
    /// instead of the system's roots, and `headers` on every request.
    pub fn new(
        endpoint: &str,
        ca: Option<&std::path::Path>,
        headers: &[(String, String)],
        labels: Labels,
    ) -> Result<OtlpClient, ExportError> {
        let ca = match ca {
            Some(p) => Some(std::fs::read(p).map_err(|source| ExportError::ReadCa {
                path: p.to_path_buf(),
                source,
            })?),
            None => None,
        };
        let mut parsed = Vec::new();
        for (k, v) in headers {
            let key = k.parse().map_err(|_| ExportError::HeaderKey(k.clone()))?;
            let value = v.parse().map_err(|_| ExportError::HeaderValue(k.clone()))?;
            parsed.push((key, value));
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ExportError::OtlpRuntime)?;
        Ok(OtlpClient {
            endpoint: endpoint.to_string(),
            ca,
            headers: parsed,
            runtime,
            client: None,
            labels,
        })
    }

    async fn connect(&self) -> Result<ProfilesServiceClient<tonic::transport::Channel>, SendError> {
        // An endpoint or TLS setting that does not parse will not parse later.
        let mut ep = tonic::transport::Endpoint::from_shared(self.endpoint.clone())
            .map_err(|e| SendError::Permanent(format!("{}: {e}", self.endpoint)))?
            .connect_timeout(std::time::Duration::from_secs(10))
            .timeout(TIMEOUT)
            // An answer is a few bytes and a status: headers (where a gRPC
            // status message travels) are held to 64 KiB, not h2's 16 MiB.
            .http2_max_header_list_size(64 << 10);
        if self.endpoint.starts_with("https://") {
            let mut tls = tonic::transport::ClientTlsConfig::new();
            tls = match &self.ca {
                Some(pem) => tls.ca_certificate(tonic::transport::Certificate::from_pem(pem)),
                None => tls.with_native_roots(),
            };
            ep = ep
                .tls_config(tls)
                .map_err(|e| SendError::Permanent(format!("TLS for {}: {e}", self.endpoint)))?;
        }
        // Refused, reset, unreachable, a handshake cut short: it may be up later.
        let channel = ep.connect().await.map_err(|e| {
            SendError::Transient(format!(
                "cannot connect to {}: {}",
                self.endpoint,
                crate::error::error_chain(&e)
            ))
        })?;
        Ok(ProfilesServiceClient::new(channel)
            .send_compressed(tonic::codec::CompressionEncoding::Gzip)
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
            .max_decoding_message_size(64 << 10))
    }
}

impl super::Exporter for OtlpClient {
    fn name(&self) -> &'static str {
        "otlp"
    }

    fn send(&mut self, rec: &Recording) -> Result<u64, SendError> {
        let request = build(rec, &self.labels);
        if request.resource_profiles.is_empty() {
            return Ok(0);
        }
        let bytes = prost::Message::encoded_len(&request) as u64;
        let client = match self.client.take() {
            Some(c) => c,
            None => self.runtime.block_on(self.connect())?,
        };
        let mut req = tonic::Request::new(request);
        req.set_timeout(TIMEOUT);
        for (k, v) in &self.headers {
            req.metadata_mut().insert(k.clone(), v.clone());
        }
        let mut c = client.clone();
        let result = self
            .runtime
            .block_on(async { tokio::time::timeout(TIMEOUT, c.export(req)).await });
        match result {
            Ok(Ok(resp)) => {
                self.client = Some(client);
                if let Some(p) = resp
                    .into_inner()
                    .partial_success
                    .filter(|p| p.rejected_profiles > 0)
                {
                    // It took the rest: sending it all again would duplicate that.
                    return Err(SendError::Permanent(format!(
                        "{} rejected {} profiles: {}",
                        self.endpoint,
                        p.rejected_profiles,
                        super::error::answer_text(&p.error_message)
                    )));
                }
                Ok(bytes)
            }
            Ok(Err(status)) => Err(SendError::grpc(
                status.code(),
                format!(
                    "{} answered {:?}: {}",
                    self.endpoint,
                    status.code(),
                    super::error::answer_text(status.message())
                ),
            )),
            Err(_) => Err(SendError::Transient(format!(
                "{} did not answer within {} s",
                self.endpoint,
                TIMEOUT.as_secs()
            ))),
        }
    }
}

#[cfg(test)]
mod tests;
