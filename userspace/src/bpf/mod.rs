//! Loading the eBPF side and reading what it sends.
//!
//! In: the committed `ebpf/sample.bpf.o` (embedded in the binary), the
//! sampling frequency and an optional pid filter. Out: a [`Sampler`] whose
//! ring buffer yields raw sample records (decoded by [`abi`]), and the drop
//! counters the kernel side kept. Loading uses aya; CO-RE relocations are
//! resolved against `/sys/kernel/btf/vmlinux`.

pub mod abi;

use aya::maps::{MapData, PerCpuArray, RingBuf};
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::PerfEvent;
use aya::{Ebpf, EbpfLoader};

use crate::error::RecordError;

/// The sampler object, built by `cargo xtask build-ebpf`.
static SAMPLE_BPF_OBJECT: &[u8] = include_bytes_aligned!("../../../ebpf/sample.bpf.o");

/// `include_bytes!` with 8-byte alignment, which ELF parsing needs.
macro_rules! include_bytes_aligned {
    ($path:expr) => {{
        #[repr(C, align(8))]
        struct Aligned<B: ?Sized>(B);
        static ALIGNED: &Aligned<[u8]> = &Aligned(*include_bytes!($path));
        &ALIGNED.0
    }};
}
use include_bytes_aligned;

/// Options for the kernel side.
#[derive(Debug, Clone)]
pub struct SamplerOptions {
    /// Samples per second per CPU.
    pub frequency: u64,
    /// Only sample this process (0: every process).
    pub target_tgid: u32,
    /// Size of the sample ring buffer in bytes (a power of two).
    pub ring_bytes: u32,
    /// Bytes waiting in the ring before the kernel wakes the reader; the
    /// reader also drains on a timer, so this only bounds the latency.
    pub wakeup_bytes: u64,
}

/// The loaded and attached cpu-clock sampler. Its sample records arrive in
/// the [`RingBuf`] that [`Sampler::start`] returns beside it.
pub struct Sampler {
    // Keeps programs and links alive; dropping it detaches everything.
    _ebpf: Ebpf,
    drops: PerCpuArray<MapData, u64>,
}

/// Per-reason totals of what the kernel side lost.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KernelDrops {
    /// Samples lost whole because the ring buffer was full.
    pub ring_full: u64,
    /// Samples kept without their kernel stack.
    pub kernel_stack: u64,
    /// Samples kept without their user stack.
    pub user_stack: u64,
}

impl Sampler {
    /// Load the sampler and attach it to a cpu-clock event on every online CPU.
    pub fn start(opts: &SamplerOptions) -> Result<(Sampler, RingBuf<MapData>), RecordError> {
        let mut ebpf = EbpfLoader::new()
            .override_global("targ_tgid", &opts.target_tgid, true)
            .override_global("wakeup_bytes", &opts.wakeup_bytes, true)
            .map_max_entries("samples", opts.ring_bytes)
            .load(SAMPLE_BPF_OBJECT)
            .map_err(|e| RecordError::from_bpf_load(&e))?;
        let program: &mut PerfEvent = ebpf
            .program_mut("sample_cpu_clock")
            .ok_or_else(|| RecordError::Internal("sample_cpu_clock missing from object".into()))?
            .try_into()
            .map_err(|e| RecordError::Internal(format!("sample_cpu_clock: {e}")))?;
        program.load().map_err(|e| RecordError::from_program_load("sample_cpu_clock", &e))?;
        for cpu in online_cpus()? {
            program
                .attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Frequency(opts.frequency),
                    false,
                )
                .map_err(|e| RecordError::PerfEvent {
                    what: format!("cpu-clock sampling on CPU {cpu}"),
                    source: std::io::Error::other(e.to_string()),
                })?;
        }
        let ring = RingBuf::try_from(take(&mut ebpf, "samples")?)
            .map_err(|e| RecordError::Internal(format!("samples ring: {e}")))?;
        let drops = PerCpuArray::try_from(take(&mut ebpf, "drops")?)
            .map_err(|e| RecordError::Internal(format!("drops map: {e}")))?;
        Ok((Sampler { _ebpf: ebpf, drops }, ring))
    }

    /// Sum the per-CPU drop counters.
    pub fn drops(&self) -> KernelDrops {
        let sum = |reason: u32| -> u64 {
            self.drops.get(&reason, 0).map(|v| v.iter().sum()).unwrap_or(0)
        };
        KernelDrops {
            ring_full: sum(abi::DROP_RINGBUF_FULL),
            kernel_stack: sum(abi::DROP_KSTACK),
            user_stack: sum(abi::DROP_USTACK),
        }
    }
}

fn take(ebpf: &mut Ebpf, name: &str) -> Result<aya::maps::Map, RecordError> {
    ebpf.take_map(name)
        .ok_or_else(|| RecordError::Internal(format!("map {name} missing from object")))
}

/// The online CPUs, from `/sys/devices/system/cpu/online`.
pub fn online_cpus() -> Result<Vec<u32>, RecordError> {
    aya::util::online_cpus().map_err(|(path, e)| RecordError::Internal(format!("{path}: {e}")))
}
