//! Symbolication: addresses to function names, files, lines and inlined calls.
//!
//! In: per binary, the distinct file offsets that were sampled; the distinct
//! kernel addresses. Out: for each address, its [`AddrInfo`]: the function
//! and the functions inlined into it at that address (outermost first), or
//! nothing when it cannot be resolved (the reason becomes a warning; the
//! frame keeps its library and address). Each unique address is symbolized
//! exactly once, with one blazesym call per binary. Kernel addresses are
//! named from the kallsyms snapshot in [`kernel`]. (Interpreted and JIT
//! frames are named by their runtime's reader: [`crate::runtimes`].)

pub mod kernel;
mod kernel_cache;
pub mod names;

use std::panic::AssertUnwindSafe;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};

pub use crate::model::symbols::{AddrInfo, FuncAtAddr};

/// One request to the symbolizer thread.
struct Request {
    path: String,
    addrs: Vec<u64>,
    /// Addresses are virtual (the ELF's), not file offsets.
    virt: bool,
    /// Let it read DWARF (file, line, inlined calls), not only symbol tables.
    debug_syms: bool,
}

type Reply = Result<Vec<AddrInfo>, SymbolizeError>;

/// Why a file's addresses could not be named (its frames then keep library
/// and address).
#[derive(Debug, thiserror::Error)]
pub enum SymbolizeError {
    /// The thread that runs blazesym is gone (it panicked outside a call).
    #[error("the symbolizer thread is gone")]
    ThreadGone,
    /// The file took longer than the budget.
    #[error("reading it took more than {secs} s; given up")]
    TimedOut {
        /// The budget, in seconds.
        secs: u64,
    },
    /// blazesym refused the file.
    #[error("{0:#}")]
    Blazesym(#[source] blazesym::Error),
    /// blazesym panicked on the file (caught).
    #[error("the symbolizer panicked on this file")]
    Panicked,
    /// blazesym's answer does not fit the question.
    #[error("the symbolizer answered for the wrong number of addresses")]
    WrongCount,
    /// It failed with DWARF and again from the symbol tables alone.
    #[error("{with}; without DWARF: {without}")]
    WithoutDwarf {
        /// The failure reading DWARF.
        with: Box<SymbolizeError>,
        /// The failure without it.
        without: Box<SymbolizeError>,
    },
}

/// Runs blazesym on a thread of its own, so each call has a time budget: a
/// file that takes too long is given up (its frames keep library and
/// address) and the next call gets a fresh thread. blazesym's parsed files
/// stay cached in that thread between calls.
pub struct Symbolicator {
    worker: Option<std::sync::mpsc::Sender<(Request, std::sync::mpsc::Sender<Reply>)>>,
    budget: std::time::Duration,
    /// The files the worker's blazesym holds, by the path it knows them by
    /// (it caches per path, and a path names one file at a time), and their
    /// sizes: what it may have mapped and parsed.
    held: rustc_hash::FxHashMap<String, u64>,
}

impl Default for Symbolicator {
    fn default() -> Self {
        Self::new()
    }
}

/// Time one binary's symbolication may take before it is given up.
const SYMBOLIZE_BUDGET: std::time::Duration = std::time::Duration::from_secs(30);

impl Symbolicator {
    /// A symbolizer with file/line, inlined functions and demangling on.
    pub fn new() -> Symbolicator {
        Symbolicator {
            worker: None,
            budget: SYMBOLIZE_BUDGET,
            held: Default::default(),
        }
    }

    /// Bytes of the files its blazesym holds (their sizes: an upper bound
    /// on what it mapped; what it parsed is a fraction of that).
    pub fn held_bytes(&self) -> u64 {
        self.held.values().sum()
    }

    /// Files its blazesym holds (each mapped and parsed until it is let go).
    pub fn held_files(&self) -> usize {
        self.held.len()
    }

    /// Whether its thread runs (holding what it parsed).
    pub fn is_running(&self) -> bool {
        self.worker.is_some()
    }

    /// Set the time one call may take.
    pub fn with_budget(mut self, budget: std::time::Duration) -> Symbolicator {
        self.budget = budget;
        self
    }

    fn spawn() -> std::sync::mpsc::Sender<(Request, std::sync::mpsc::Sender<Reply>)> {
        let (tx, rx) = std::sync::mpsc::channel::<(Request, std::sync::mpsc::Sender<Reply>)>();
        // Counted before it starts, uncounted after its blazesym is gone.
        let running = Running::count();
        std::thread::Builder::new()
            .name("sysprof-symbolize".into())
            .spawn(move || {
                let _running = running;
                // Auto reload: files reach blazesym as /proc/self/fd/N, and a
                // closed descriptor's number is reused for the next file
                // opened; blazesym's cache is keyed by path, so it must
                // check (by device, inode, size and mtime) that a path
                // still names the file it parsed.
                let inner = Symbolizer::builder()
                    .enable_code_info(true)
                    .enable_inlined_fns(true)
                    .enable_demangling(true)
                    .enable_auto_reload(true)
                    .build();
                for (req, reply) in rx {
                    let _ = reply.send(run(&inner, &req));
                }
            })
            .expect("spawning the symbolizer thread");
        tx
    }

    fn call(&mut self, req: Request) -> Reply {
        if self.worker.is_none() {
            self.held.clear();
        }
        let size = std::fs::metadata(&req.path).map_or(0, |m| m.len());
        self.held.insert(req.path.clone(), size);
        let worker = self.worker.get_or_insert_with(Self::spawn);
        let (reply_tx, reply_rx) = std::sync::mpsc::channel();
        if worker.send((req, reply_tx)).is_err() {
            self.worker = None;
            return Err(SymbolizeError::ThreadGone);
        }
        match reply_rx.recv_timeout(self.budget) {
            Ok(r) => r,
            Err(_) => {
                // Leave that thread to finish or hang on its own.
                self.worker = None;
                Err(SymbolizeError::TimedOut {
                    secs: self.budget.as_secs(),
                })
            }
        }
    }

    /// Symbolize file offsets in the ELF file at `path`. Returns one entry
    /// per offset, or why the file could not be read at all.
    pub fn symbolize_elf(
        &mut self,
        path: &str,
        file_offsets: &[u64],
        debug_syms: bool,
    ) -> Result<Vec<AddrInfo>, SymbolizeError> {
        self.call(Request {
            path: path.to_string(),
            addrs: file_offsets.to_vec(),
            virt: false,
            debug_syms,
        })
    }

    /// Symbolize virtual offsets (ELF addresses) in the ELF file at `path`,
    /// e.g. a separate debug file, whose file offsets mean nothing for code.
    pub fn symbolize_elf_virt(
        &mut self,
        path: &str,
        virt_offsets: &[u64],
        debug_syms: bool,
    ) -> Result<Vec<AddrInfo>, SymbolizeError> {
        self.call(Request {
            path: path.to_string(),
            addrs: virt_offsets.to_vec(),
            virt: true,
            debug_syms,
        })
    }
}

/// Mappings blazesym holds whose pages are let go after each call: a
/// smaller file's pages are not worth the faults again.
const RELEASE_MAPPINGS_FROM_BYTES: u64 = 1 << 20;

/// Symbolizer threads running (one, unless a call ran past its budget and
/// its thread was left to finish on its own: then no pages are let go until
/// it ends, and never if it hangs).
static SYMBOLIZER_THREADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Held while a symbolizer thread is counted, and while the count is
/// checked and pages let go.
static SPAWNING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Counts a symbolizer thread from before it starts until it ends.
struct Running;

impl Running {
    fn count() -> Running {
        let _held = SPAWNING.lock().unwrap_or_else(|e| e.into_inner());
        SYMBOLIZER_THREADS.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        SYMBOLIZER_THREADS.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

fn run(inner: &Symbolizer, req: &Request) -> Reply {
    let mut elf = Elf::new(&req.path);
    elf.debug_syms = req.debug_syms;
    let src = Source::Elf(elf);
    let input = if req.virt {
        Input::VirtOffset(&req.addrs[..])
    } else {
        Input::FileOffset(&req.addrs[..])
    };
    // Malformed files must not take the recording down with them: a parser
    // panic becomes an error like any other.
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| inner.symbolize(&src, input)));
    let symbolized = match result {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => return Err(SymbolizeError::Blazesym(e)),
        Err(_) => return Err(SymbolizeError::Panicked),
    };
    // blazesym keeps the file mapped, and parsing it touched nearly all of
    // it: those pages are let go (the page cache keeps them) until the
    // next lookup faults in what it reads.
    if let Ok(meta) = std::fs::metadata(&req.path) {
        use std::os::unix::fs::MetadataExt;
        if meta.len() >= RELEASE_MAPPINGS_FROM_BYTES {
            // Held across the count's check and the release, as spawning
            // holds it to count a thread: none starts meanwhile.
            let one = SPAWNING.lock().unwrap_or_else(|e| e.into_inner());
            if SYMBOLIZER_THREADS.load(std::sync::atomic::Ordering::Acquire) == 1 {
                // SAFETY: this thread's blazesym is the only one that maps
                // files here (no other symbolizer thread runs or starts, and
                // nothing else in sysprof maps a file), and it is not
                // running now.
                unsafe { crate::sys::file_pages::release(meta.dev(), meta.ino(), meta.len()) };
            }
            drop(one);
        }
    }
    if symbolized.len() != req.addrs.len() {
        return Err(SymbolizeError::WrongCount);
    }
    Ok(symbolized.into_iter().map(to_addr_info).collect())
}

fn to_addr_info(s: Symbolized<'_>) -> AddrInfo {
    let Symbolized::Sym(sym) = s else {
        return AddrInfo::default();
    };
    let code_file = |ci: &blazesym::symbolize::CodeInfo<'_>| -> String {
        match &ci.dir {
            Some(dir) => dir.join(&ci.file).to_string_lossy().into_owned(),
            None => ci.file.to_string_lossy().into_owned(),
        }
    };
    // Outermost first, as blazesym reports them; each carries the location
    // blazesym attributes to it at this address.
    let mut funcs = Vec::with_capacity(1 + sym.inlined.len());
    let outer_loc = sym.code_info.as_deref();
    funcs.push(FuncAtAddr {
        name: sym.name.to_string(),
        file: outer_loc.map(code_file),
        line: outer_loc.and_then(|c| c.line),
        start_line: None,
    });
    for inl in sym.inlined.iter() {
        funcs.push(FuncAtAddr {
            name: inl.name.to_string(),
            file: inl.code_info.as_ref().map(code_file),
            line: inl.code_info.as_ref().and_then(|c| c.line),
            start_line: None,
        });
    }
    AddrInfo {
        symbol_start: sym.addr,
        symbol_offset: sym.offset as u64,
        symbol_size: sym.size.map(|s| s as u64),
        funcs,
    }
}

/// How long one sysprof process may spend fetching from debuginfod, in
/// all: what a recording's end can wait for it (`--help` says so).
pub const DEBUGINFOD_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether debug files are fetched when the user said neither
/// `--debuginfod` nor `--no-debuginfod`: when `DEBUGINFOD_URLS` names a
/// server, as perf and GNOME Sysprof do.
pub fn debuginfod_configured() -> bool {
    std::env::var_os("DEBUGINFOD_URLS").is_some_and(|v| !v.to_string_lossy().trim().is_empty())
}

/// What this process spent on debuginfod, and the build ids it asked for
/// (each is asked once: a server without it would be asked every window).
static DEBUGINFOD_SPENT: std::sync::Mutex<(std::time::Duration, Vec<Vec<u8>>)> =
    std::sync::Mutex::new((std::time::Duration::ZERO, Vec::new()));

/// Fetch the debug files of these build ids from the debuginfod servers in
/// `DEBUGINFOD_URLS` (cached under `DEBUGINFOD_CACHE_PATH` or
/// ~/.cache/debuginfod_client), with the debuginfod crate, within what is
/// left of [`DEBUGINFOD_BUDGET`]; each build id is asked once per process.
/// Runs on its own thread: the blocking HTTP client must not run inside the
/// async recorder. Returns the paths found, and why the others are missing.
pub fn fetch_debuginfod(build_ids: Vec<(u32, Vec<u8>)>) -> (Vec<(u32, String)>, Vec<String>) {
    let wanted: Vec<(u32, Vec<u8>)> = {
        let mut spent = DEBUGINFOD_SPENT.lock().unwrap_or_else(|e| e.into_inner());
        let fresh: Vec<(u32, Vec<u8>)> = build_ids
            .into_iter()
            .filter(|(_, id)| !spent.1.contains(id))
            .collect();
        spent.1.extend(fresh.iter().map(|(_, id)| id.clone()));
        fresh
    };
    if wanted.is_empty() {
        return (Vec::new(), Vec::new());
    }
    std::thread::spawn(move || {
        let spent_before = DEBUGINFOD_SPENT
            .lock()
            .map(|s| s.0)
            .unwrap_or(DEBUGINFOD_BUDGET);
        let Some(left) = DEBUGINFOD_BUDGET
            .checked_sub(spent_before)
            .filter(|d| !d.is_zero())
        else {
            return (
                Vec::new(),
                vec![format!(
                    "debuginfod: {} debug files not asked for: its {}-s budget is spent",
                    wanted.len(),
                    DEBUGINFOD_BUDGET.as_secs()
                )],
            );
        };
        let started = std::time::Instant::now();
        // Every request ends within what is left of the budget.
        let http = match reqwest::blocking::Client::builder().timeout(left).build() {
            Ok(h) => h,
            Err(e) => return (Vec::new(), vec![format!("debuginfod: {e:#}")]),
        };
        let client = match debuginfod::Client::builder()
            .http_client(http)
            .build_from_env()
        {
            Ok(Some(c)) => c,
            Ok(None) => {
                return (
                    Vec::new(),
                    vec![
                    "--debuginfod: DEBUGINFOD_URLS is not set; set it to your debuginfod server(s)"
                        .into(),
                ],
                )
            }
            Err(e) => return (Vec::new(), vec![format!("debuginfod: {e:#}")]),
        };
        let client = match debuginfod::CachingClient::from_env(client) {
            Ok(c) => c,
            Err(e) => return (Vec::new(), vec![format!("debuginfod: {e:#}")]),
        };
        let mut found = Vec::new();
        let mut errors = Vec::new();
        let mut unasked = 0;
        for (key, id) in wanted {
            if started.elapsed() >= left {
                unasked += 1;
                continue;
            }
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            match client.fetch_debug_info(&debuginfod::BuildId::raw(id)) {
                Ok(Some(path)) => found.push((key, path.to_string_lossy().into_owned())),
                Ok(None) => {}
                Err(e) => {
                    // The client's errors repeat their cause two or three
                    // times over (1-2 KiB): the root cause says it.
                    let text = e.root_cause().to_string();
                    let mut cut: String = text.chars().take(200).collect();
                    if cut.len() < text.len() {
                        cut.push('…');
                    }
                    errors.push(format!("debuginfod: build id {hex}: {cut}"))
                }
            }
        }
        if unasked > 0 {
            errors.push(format!(
                "debuginfod: {unasked} debug files not asked for: its {}-s budget is spent",
                DEBUGINFOD_BUDGET.as_secs()
            ));
        }
        if let Ok(mut s) = DEBUGINFOD_SPENT.lock() {
            s.0 += started.elapsed();
        }
        (found, errors)
    })
    .join()
    .unwrap_or_else(|_| {
        (
            Vec::new(),
            vec!["debuginfod: the fetching thread panicked".into()],
        )
    })
}

/// The running kernel's build id, for the kernel "library".
pub fn kernel_build_id() -> Option<Vec<u8>> {
    std::fs::read("/sys/kernel/notes")
        .ok()
        .and_then(|n| crate::binaries::elf::gnu_build_id_from_notes(&n))
}
