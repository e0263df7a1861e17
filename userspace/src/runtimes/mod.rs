//! The runtimes whose frames sysprof reads beside the native ones: CPython,
//! HotSpot, V8, PHP, Perl and Ruby, one folder each, Go's goroutine labels, and the registry that finds them.
//!
//! In: from the native unwinder, as it writes a process's kernel entry,
//! the binaries the process maps and where ([`crate::unwind::RuntimeDetection`]);
//! from the collector, each sample's native stack and what the kernel read
//! of the runtime's frames. Out: per process the runtimes it runs
//! ([`ProcessRuntimes`]) and the kernel entry's fields for them; the
//! runtimes' frames by name in the collector's stacks
//! ([`frames::RuntimeFrames`]).
//!
//! Each runtime's folder holds every part of it: what its binary is
//! (`binary`), where one process maps it (`process`), reading its objects
//! from the process's memory (`read`), and its frames put where they ran
//! (`frames`). A binary is read once, and only when its name says it may be
//! the runtime's; what it could not be read as is said once. Adding a
//! runtime is a folder, a field of [`ProcessRuntimes`] and its detection in
//! the registry's `detect` (with the kernel entry's field in
//! [`RuntimeEntry`] if its frames are read in the kernel), and, for its
//! frames, a field of [`RuntimeReaders`] with a line in its `each` and a
//! branch in its `merge`.
//!
//! This layer sits between unwind and symbolize (below) and the collector
//! (above); the native unwinder holds the registry behind its trait and
//! names no runtime.

pub mod chain;
pub mod frames;
pub mod go;
pub mod hotspot;
pub mod perl;
pub mod php;
pub mod python;
pub mod ruby;
pub mod v8;

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::binaries::elf::ElfReader;
use crate::binaries::{Binaries, BinaryIndex};
use crate::escape::escape;
use crate::unwind::{RuntimeDetection, RuntimeEntry, Unwinders};
use frames::{CodeCache, RuntimeFrames};
use go::binary::GoBinary;
use go::process::GoRuntime;
use hotspot::binary::HotSpotSymbols;
use hotspot::process::JavaRuntime;
use perl::binary::PerlBinary;
use perl::process::PerlRuntime;
use php::binary::PhpBinary;
use php::process::PhpRuntime;
use python::binary::PythonBinary;
use python::process::PythonRuntime;
use ruby::binary::RubyBinary;
use ruby::process::RubyRuntime;
use v8::binary::V8Symbols;
use v8::process::V8Runtime;

/// What the collector asks of each runtime's userspace side, alike for
/// all: follow a process's end, forget it, say and shed what it holds.
/// When is the collector's to say (its `Followers`, the one owner of a
/// process's lifetime): an exec is an end and a forgetting at once; an exit
/// is an end now and a forgetting once the process's last samples are in.
pub trait RuntimeReader {
    /// `pid` exec'd or exited: nothing more is to be asked of it; what was
    /// read of it still names its queued samples.
    fn ended(&mut self, _pid: u32) {}
    /// What was read of `pid` goes.
    fn forget(&mut self, pid: u32);
    /// Bytes of what was read from processes and is kept.
    fn held_bytes(&self) -> usize;
    /// Under memory pressure: drop what was read (read again as used).
    fn shed(&mut self);
}

/// Which runtime's frames a stack was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merged {
    /// CPython's, in place of its eval loop's frames.
    Python,
    /// HotSpot's interpreted and compiled methods.
    Java,
    /// V8's JavaScript functions.
    JavaScript,
    /// PHP's, in place of its VM loop's frames.
    Php,
    /// Perl's, in place of its run loop's frames.
    Perl,
    /// Ruby's, in place of its VM loop's frames.
    Ruby,
    /// A Go goroutine's labels, at the root.
    Go,
}

/// Every runtime's userspace side: what was read from processes' memory
/// to name their frames, and what asks them for more.
#[derive(Default)]
pub struct RuntimeReaders {
    /// CPython code objects.
    pub python: CodeCache,
    /// Python threads' names (`threading`), read from the interpreters.
    pub python_threads: python::threads::PythonThreadNames,
    /// The JVMs' interpreters and the Java methods read from them.
    pub java: hotspot::frames::JavaFrames,
    /// JVMs asked for their perf maps.
    pub jvms: hotspot::perf_maps::Jvms,
    /// V8 processes' constants and JavaScript functions.
    pub js: v8::frames::JsFrames,
    /// PHP functions.
    pub php: CodeCache,
    /// Perl subs and files.
    pub perl: CodeCache,
    /// Ruby iseqs.
    pub ruby: CodeCache,
    /// Go goroutines' label maps.
    pub go: CodeCache,
}

impl RuntimeReaders {
    /// The readers that follow processes (thread names are kept by pid
    /// until the process is gone: `python_threads.forget`).
    fn each(&mut self) -> [&mut dyn RuntimeReader; 8] {
        [
            &mut self.python,
            &mut self.java,
            &mut self.jvms,
            &mut self.js,
            &mut self.php,
            &mut self.perl,
            &mut self.ruby,
            &mut self.go,
        ]
    }

    /// `pid` exec'd or exited: every runtime stops asking it.
    pub fn ended(&mut self, pid: u32) {
        self.each().into_iter().for_each(|r| r.ended(pid));
    }

    /// What every runtime read of `pid` goes.
    pub fn forget(&mut self, pid: u32) {
        self.each().into_iter().for_each(|r| r.forget(pid));
    }

    /// Bytes read from processes and kept, all runtimes.
    pub fn held_bytes(&self) -> usize {
        let each: [&dyn RuntimeReader; 8] = [
            &self.python,
            &self.java,
            &self.jvms,
            &self.js,
            &self.php,
            &self.perl,
            &self.ruby,
            &self.go,
        ];
        each.into_iter().map(|r| r.held_bytes()).sum()
    }

    /// Under memory pressure: every runtime drops what it read. The bytes
    /// it held.
    pub fn shed(&mut self) -> usize {
        let held = self.held_bytes();
        self.each().into_iter().for_each(|r| r.shed());
        held
    }

    /// A user stack the kernel walked for `pid` (`native`, leaf first,
    /// perhaps ending in a cut) with the CPython chain it read beside it
    /// (`chain`: CPython's, PHP's, Perl's or Ruby's, as the process runs,
    /// and whether the kernel's walk of it reached its root): the frames
    /// of the runtime it shows put where they ran, keyed in `table`, into
    /// `out`. None: no runtime's frames (the stack stands as walked).
    pub fn merge(
        &mut self,
        unwinders: Option<&Unwinders<Runtimes>>,
        pid: u32,
        native: &[u64],
        chain: chain::KernelChain<'_>,
        table: &mut RuntimeFrames,
        out: &mut Vec<u64>,
    ) -> Option<Merged> {
        if hotspot::frames::JavaFrames::has_java_words(native) {
            let java = unwinders.and_then(|u| u.java(pid));
            self.java.merge(native, pid, java, table, out);
            return Some(Merged::Java);
        }
        if v8::frames::JsFrames::has_v8_words(native) {
            let v8 = unwinders.and_then(|u| u.v8(pid));
            self.js.merge(native, pid, v8, table, out);
            return Some(Merged::JavaScript);
        }
        if chain.pairs.is_empty() {
            return None;
        }
        if let Some(go) = unwinders.and_then(|u| u.go(pid)) {
            go::frames::merge(native, chain, pid, go, &mut self.go, table, out);
            return Some(Merged::Go);
        }
        if let Some(php) = unwinders.and_then(|u| u.php(pid)) {
            php::frames::merge(native, chain, pid, php, &mut self.php, table, out);
            return Some(Merged::Php);
        }
        if let Some(perl) = unwinders.and_then(|u| u.perl(pid)) {
            perl::frames::merge(native, chain, pid, perl, &mut self.perl, table, out);
            return Some(Merged::Perl);
        }
        if let Some(ruby) = unwinders.and_then(|u| u.ruby(pid)) {
            ruby::frames::merge(native, chain, pid, ruby, &mut self.ruby, table, out);
            return Some(Merged::Ruby);
        }
        let py = unwinders.and_then(|u| u.python(pid))?;
        python::frames::merge(native, chain, pid, py, &mut self.python, table, out);
        Some(Merged::Python)
    }
}

/// The runtimes one process runs, found when its kernel entry is written.
#[derive(Debug, Default, Clone)]
pub struct ProcessRuntimes {
    /// The CPython interpreter it runs.
    pub python: Option<PythonRuntime>,
    /// It runs a CPython of a version this build does not read.
    pub python_unread: bool,
    /// The HotSpot it runs.
    pub java: Option<JavaRuntime>,
    /// The V8 it embeds (node).
    pub v8: Option<V8Runtime>,
    /// The PHP it runs.
    pub php: Option<PhpRuntime>,
    /// The Perl it runs.
    pub perl: Option<PerlRuntime>,
    /// The Ruby it runs.
    pub ruby: Option<RubyRuntime>,
    /// The Go program it is.
    pub go: Option<GoRuntime>,
}

/// What each binary is, per runtime, read once (None: not the runtime's,
/// or one this build cannot read).
#[derive(Default)]
pub struct Runtimes {
    pythons: FxHashMap<BinaryIndex, Option<Arc<PythonBinary>>>,
    /// CPython interpreters of a version this build does not read.
    unread_pythons: FxHashSet<BinaryIndex>,
    hotspots: FxHashMap<BinaryIndex, Option<Arc<HotSpotSymbols>>>,
    v8s: FxHashMap<BinaryIndex, Option<Arc<V8Symbols>>>,
    phps: FxHashMap<BinaryIndex, Option<Arc<PhpBinary>>>,
    perls: FxHashMap<BinaryIndex, Option<Arc<PerlBinary>>>,
    rubies: FxHashMap<BinaryIndex, Option<Arc<RubyBinary>>>,
    gos: FxHashMap<BinaryIndex, Option<Arc<GoBinary>>>,
    /// Binaries whose runtime's frames are not read, with why.
    failures: Vec<String>,
}

impl RuntimeDetection for Runtimes {
    type Process = ProcessRuntimes;

    fn detect(
        &mut self,
        binaries: &Binaries,
        mapped: &[(BinaryIndex, u64)],
        process: &mut ProcessRuntimes,
    ) -> RuntimeEntry {
        let java_before = process.java.take();
        let mut found = ProcessRuntimes::default();
        for &(binary, base) in mapped {
            if found.java.is_none() {
                found.java = self.hotspot_binary(binaries, binary).map(|symbols| {
                    // The interpreter read before stays while libjvm stays where it was.
                    let before = java_before
                        .as_ref()
                        .filter(|j| j.base == base && Arc::ptr_eq(&j.symbols, &symbols));
                    JavaRuntime {
                        symbols,
                        base,
                        interpreter: before.and_then(|j| j.interpreter),
                        code: before.and_then(|j| j.code),
                    }
                });
            }
            if found.v8.is_none() {
                found.v8 = self
                    .v8_binary(binaries, binary)
                    .map(|symbols| V8Runtime { symbols });
            }
            if found.php.is_none() {
                found.php = self
                    .php_binary(binaries, binary)
                    .map(|binary| PhpRuntime { binary, base });
            }
            if found.perl.is_none() {
                found.perl = self
                    .perl_binary(binaries, binary)
                    .map(|binary| PerlRuntime { binary, base });
            }
            if found.ruby.is_none() {
                found.ruby = self
                    .ruby_binary(binaries, binary)
                    .map(|binary| RubyRuntime { binary, base });
            }
            if found.go.is_none() {
                found.go = self
                    .go_binary(binaries, binary)
                    .map(|binary| GoRuntime { binary, base });
            }
            if found.python.is_none() {
                found.python = self
                    .python_binary(binaries, binary)
                    .map(|binary| PythonRuntime { binary, base });
                found.python_unread |= self.unread_pythons.contains(&binary);
            }
        }
        found.python_unread &= found.python.is_none();
        // One interpreter's chain per process, the kernel's and the merge's
        // alike: CPython's where several are mapped (PHP or Perl embedding
        // Python), then PHP's.
        if found.python.is_some() {
            found.php = None;
        }
        if found.python.is_some() || found.php.is_some() {
            found.perl = None;
        }
        if found.python.is_some() || found.php.is_some() || found.perl.is_some() {
            found.ruby = None;
        }
        // A Go program embedding an interpreter through cgo: the interpreter's.
        if found.python.is_some()
            || found.php.is_some()
            || found.perl.is_some()
            || found.ruby.is_some()
        {
            found.go = None;
        }
        let entry = RuntimeEntry {
            // One interpreter's chain per process (above).
            python: found
                .python
                .as_ref()
                .map(PythonRuntime::entry)
                .or_else(|| found.php.as_ref().map(PhpRuntime::entry))
                .or_else(|| found.perl.as_ref().map(PerlRuntime::entry))
                .or_else(|| found.ruby.as_ref().map(RubyRuntime::entry))
                .or_else(|| found.go.as_ref().map(GoRuntime::entry)),
            interpreter: found.java.as_ref().and_then(|j| j.interpreter),
            code_heaps: found.java.as_ref().and_then(|j| j.code),
            js: found.v8.as_ref().map(|v| v.symbols.kernel()),
        };
        *process = found;
        entry
    }

    fn forget_binaries(&mut self, released: &[BinaryIndex]) {
        for b in released {
            self.pythons.remove(b);
            self.unread_pythons.remove(b);
            self.hotspots.remove(b);
            self.v8s.remove(b);
            self.phps.remove(b);
            self.perls.remove(b);
            self.rubies.remove(b);
            self.gos.remove(b);
        }
    }

    fn take_warnings(&mut self, into: &mut Vec<String>) {
        into.append(&mut self.failures);
    }

    /// Go's only: its fields are offsets into its own structures and from
    /// the thread pointer, the same wherever the executable loads. An
    /// interpreter's are addresses in its binary or library, known once
    /// mapped (and its own startup, ~10 ms of C before any script runs,
    /// mostly outlasts the first drain). A Go program embedding an
    /// interpreter through cgo has the interpreter's once its libraries
    /// are seen, as `detect` chooses.
    fn before_exec(
        &mut self,
        file: &std::fs::File,
        name: &str,
    ) -> Option<crate::bpf::abi::PythonProcess> {
        let binary = go::binary::read(&ElfReader::new(file, Default::default()), name).ok()??;
        Some(
            GoRuntime {
                binary: Arc::new(binary),
                base: 0,
            }
            .entry(),
        )
    }
}

impl Runtimes {
    /// What `binary` exports if it is HotSpot's library, read once.
    fn hotspot_binary(
        &mut self,
        binaries: &Binaries,
        binary: BinaryIndex,
    ) -> Option<Arc<HotSpotSymbols>> {
        if let Some(known) = self.hotspots.get(&binary) {
            return known.clone();
        }
        let bin = binaries.get(binary);
        let found = bin
            .file
            .as_ref()
            .filter(|_| hotspot::binary::may_be_libjvm(&bin.name))
            .and_then(|file| hotspot::binary::read(&ElfReader::new(file, Default::default())))
            .map(Arc::new);
        self.hotspots.insert(binary, found.clone());
        found
    }

    /// What `binary` exports if it embeds V8, read once.
    fn v8_binary(&mut self, binaries: &Binaries, binary: BinaryIndex) -> Option<Arc<V8Symbols>> {
        if let Some(known) = self.v8s.get(&binary) {
            return known.clone();
        }
        let bin = binaries.get(binary);
        let read = bin
            .file
            .as_ref()
            .filter(|_| v8::binary::may_be_v8(&bin.name))
            .and_then(|file| v8::binary::read(&ElfReader::new(file, Default::default())));
        let found = match read {
            Some(Ok(s)) => Some(Arc::new(s)),
            Some(Err(e)) => {
                self.failures.push(format!(
                    "{}: its JavaScript functions stay unnamed: {e}",
                    escape(&bin.path)
                ));
                None
            }
            None => None,
        };
        self.v8s.insert(binary, found.clone());
        found
    }

    /// What PHP `binary` is, read once, and only if its name says it may be
    /// one; a PHP this build cannot walk is said once.
    fn php_binary(&mut self, binaries: &Binaries, binary: BinaryIndex) -> Option<Arc<PhpBinary>> {
        let bin = binaries.get(binary);
        interpreter_binary(
            &mut self.phps,
            &mut self.failures,
            bin,
            binary,
            "PHP",
            php::binary::may_be_php,
            php::binary::read,
        )
    }

    /// What Perl `binary` is, read once, and only if its name says it may
    /// be one; a Perl this build cannot walk is said once.
    fn perl_binary(&mut self, binaries: &Binaries, binary: BinaryIndex) -> Option<Arc<PerlBinary>> {
        let bin = binaries.get(binary);
        interpreter_binary(
            &mut self.perls,
            &mut self.failures,
            bin,
            binary,
            "Perl",
            perl::binary::may_be_perl,
            perl::binary::read,
        )
    }

    /// What `binary` is if it is a shared libruby, read once, and only if
    /// its name says it may be one; a Ruby this build cannot walk is said
    /// once.
    fn ruby_binary(&mut self, binaries: &Binaries, binary: BinaryIndex) -> Option<Arc<RubyBinary>> {
        let bin = binaries.get(binary);
        interpreter_binary(
            &mut self.rubies,
            &mut self.failures,
            bin,
            binary,
            "Ruby",
            ruby::binary::may_be_ruby,
            ruby::binary::read,
        )
    }

    /// What `binary` is if it is a Go executable, read once; a Go whose
    /// labels this build cannot read is said once.
    fn go_binary(&mut self, binaries: &Binaries, binary: BinaryIndex) -> Option<Arc<GoBinary>> {
        let bin = binaries.get(binary);
        interpreter_binary(
            &mut self.gos,
            &mut self.failures,
            bin,
            binary,
            "goroutine label",
            go::binary::may_be_go,
            go::binary::read,
        )
    }

    /// What CPython `binary` is, read once, and only if its name says it
    /// may be one; a CPython this build cannot walk is said once.
    fn python_binary(
        &mut self,
        binaries: &Binaries,
        binary: BinaryIndex,
    ) -> Option<Arc<PythonBinary>> {
        if let Some(known) = self.pythons.get(&binary) {
            return known.clone();
        }
        let bin = binaries.get(binary);
        let found = match bin
            .file
            .as_ref()
            .filter(|_| python::binary::may_be_python(&bin.name))
        {
            None => None,
            Some(file) => match python::binary::read(&ElfReader::new(file, Default::default())) {
                Ok(p) => p.map(Arc::new),
                Err(e) => {
                    self.failures
                        .push(format!("{}: no Python frames: {e}", escape(&bin.path)));
                    if matches!(e, python::binary::NotRead::Version(_)) {
                        self.unread_pythons.insert(binary);
                    }
                    None
                }
            },
        };
        self.pythons.insert(binary, found.clone());
        found
    }
}

/// What `bin` (index `binary`) is to an interpreter whose files `may_be`
/// tells by name and `read` reads (PHP's, Perl's, Ruby's), read once into
/// `cache`; one it cannot walk is said once in `failures`, as "no `what`
/// frames".
fn interpreter_binary<B, E: std::fmt::Display>(
    cache: &mut FxHashMap<BinaryIndex, Option<Arc<B>>>,
    failures: &mut Vec<String>,
    bin: &crate::binaries::Binary,
    binary: BinaryIndex,
    what: &str,
    may_be: fn(&str) -> bool,
    read: fn(&ElfReader<'_>, &str) -> Result<Option<B>, E>,
) -> Option<Arc<B>> {
    if let Some(known) = cache.get(&binary) {
        return known.clone();
    }
    let found = match bin.file.as_ref().filter(|_| may_be(&bin.name)) {
        None => None,
        Some(file) => match read(&ElfReader::new(file, Default::default()), &bin.name) {
            Ok(b) => b.map(Arc::new),
            Err(e) => {
                failures.push(format!("{}: no {what} frames: {e}", escape(&bin.path)));
                None
            }
        },
    };
    cache.insert(binary, found.clone());
    found
}

/// What the collector asks of a process's runtimes, through the unwinders
/// that keep them with the process.
impl Unwinders<Runtimes> {
    /// The CPython interpreter `pid` runs, if it runs one this build reads.
    pub fn python(&self, pid: u32) -> Option<&PythonRuntime> {
        self.runtime(pid)?.python.as_ref()
    }

    /// Whether `pid` runs a CPython of a version this build does not read:
    /// its stacks say so in their root frame.
    pub fn python_unread(&self, pid: u32) -> bool {
        self.runtime(pid).is_some_and(|r| r.python_unread)
    }

    /// The HotSpot JVM `pid` runs, if it is one.
    pub fn java(&self, pid: u32) -> Option<&JavaRuntime> {
        self.runtime(pid)?.java.as_ref()
    }

    /// The PHP `pid` runs, if it runs one this build reads.
    pub fn php(&self, pid: u32) -> Option<&PhpRuntime> {
        self.runtime(pid)?.php.as_ref()
    }

    /// The Perl `pid` runs, if it runs one this build reads.
    pub fn perl(&self, pid: u32) -> Option<&PerlRuntime> {
        self.runtime(pid)?.perl.as_ref()
    }

    /// The Ruby `pid` runs, if it runs one this build reads.
    pub fn ruby(&self, pid: u32) -> Option<&RubyRuntime> {
        self.runtime(pid)?.ruby.as_ref()
    }

    /// The Go program `pid` is, if it is one whose labels this build reads.
    pub fn go(&self, pid: u32) -> Option<&GoRuntime> {
        self.runtime(pid)?.go.as_ref()
    }

    /// A user stack of `pid` (leaf first, perhaps ending in a cut) made
    /// whole where it is a Go program's and reached Go's first frame, and
    /// ended there when the walk went on past it (see
    /// [`go::frames::whole_at_root`]).
    pub fn go_whole_at_root(&self, pid: u32, stack: &mut Vec<u64>) {
        if let Some(go) = self.go(pid) {
            go::frames::whole_at_root(go, stack);
        }
    }

    /// The V8 `pid` embeds, if it does.
    pub fn v8(&self, pid: u32) -> Option<&V8Runtime> {
        self.runtime(pid)?.v8.as_ref()
    }

    /// JVM `pid`'s interpreter lies at `range`: its entry says so from the
    /// next sync, and the kernel reads the method of each frame there.
    pub fn set_java_interpreter(
        &mut self,
        pid: u32,
        range: (u64, u64),
        code: Option<crate::bpf::abi::HotSpotCode>,
    ) {
        if self.java(pid).is_none() {
            return;
        }
        if let Some(j) = self.runtime_mut(pid).and_then(|r| r.java.as_mut()) {
            j.interpreter = Some(range);
            j.code = code;
        }
    }
}
