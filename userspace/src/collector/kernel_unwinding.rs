//! Feeding the in-kernel unwinder, and what it reports.
//!
//! In: the loader's unwind maps, the binaries the processes map. Out: the
//! kernel's unwind tables kept in step with the mappings seen; its refusals
//! and table totals for the commands' end lines and health lines.

use super::Collector;

/// Longest the start waits for the running processes' unwind tables.
const KERNEL_TABLES_AT_START: std::time::Duration = std::time::Duration::from_secs(3);

impl Collector {
    /// Load the in-kernel unwinder's tables from now on, for every process known.
    pub fn enable_kernel_unwinding(&mut self, maps: crate::unwind::kernel::KernelUnwindMaps) {
        if let Some(u) = self.followers.unwinders.as_mut() {
            u.enable_kernel(maps, self.options.table_workers);
            // The running processes' tables before the first sample (libc's
            // and a hundred more take ~0.3 s on two threads): until then
            // their samples would each hand over a stack copy, a burst the
            // ring cannot hold while the rest of the start runs.
            u.sync_kernel_waiting(
                &self.binaries,
                std::time::Instant::now() + KERNEL_TABLES_AT_START,
            );
        }
    }

    /// The runtime fields a command about to exec `file` will have, where
    /// they do not depend on where it loads (a Go executable's); None
    /// otherwise, or without the in-kernel unwinder.
    pub fn runtime_before_exec(
        &mut self,
        file: &std::fs::File,
        name: &str,
    ) -> Option<crate::bpf::abi::PythonProcess> {
        self.followers
            .unwinders
            .as_mut()
            .filter(|u| u.kernel_enabled())
            .and_then(|u| u.runtime_before_exec(file, name))
    }

    /// Write them for `pid`, held before its exec (`record`'s command).
    pub fn prime_before_exec(&mut self, pid: u32, python: crate::bpf::abi::PythonProcess) -> bool {
        self.followers
            .unwinders
            .as_mut()
            .is_some_and(|u| u.prime_before_exec(pid, python))
    }

    /// Bring the in-kernel unwinder's maps up to date with the mappings seen.
    pub fn sync_kernel_unwinding(&mut self) {
        if let Some(u) = self.followers.unwinders.as_mut() {
            u.sync_kernel(&self.binaries);
        }
        // The same tick asks the JVMs due for their perf maps.
        self.followers.readers.jvms.tick(false);
        self.give_jit_frames();
        self.read_python_thread_names(false);
    }

    /// Read the CPython processes' thread names, every
    /// [`PYTHON_NAMES_EVERY_NS`] unless `now` (a window's end): a thread
    /// leaves `threading._active` as it ends, so names are read while the
    /// threads run, not only when their window is written.
    pub(super) fn read_python_thread_names(&mut self, now: bool) {
        let Some(u) = self.followers.unwinders.as_ref() else {
            return;
        };
        let at = crate::sys::clock::monotonic_ns();
        if !now
            && at
                < self
                    .py_thread_names_at
                    .saturating_add(PYTHON_NAMES_EVERY_NS)
        {
            return;
        }
        self.py_thread_names_at = at;
        for pid in self.followers.readers.python_threads.take_sampled() {
            if let Some(py) = u.python(pid) {
                self.followers.readers.python_threads.refresh(pid, py, at);
            }
        }
    }

    /// Hand the JVMs' compiled frames that arrived to the unwinders.
    pub(super) fn give_jit_frames(&mut self) {
        let frames = self.followers.readers.jvms.take_frames();
        if let Some(u) = self.followers.unwinders.as_mut() {
            for (pid, f) in frames {
                u.set_jit_frames(pid, f);
            }
        }
    }

    /// What the in-kernel unwinder refused, per uid, all time.
    pub fn kernel_refusals(&self) -> Vec<(u32, crate::unwind::kernel::UidRefusals)> {
        self.followers
            .unwinders
            .as_ref()
            .map(|u| u.kernel_refusals())
            .unwrap_or_default()
    }

    /// The in-kernel unwinder's table totals, if it runs.
    pub fn kernel_table_stats(&self) -> Option<crate::unwind::kernel::KernelTableStats> {
        self.followers
            .unwinders
            .as_ref()
            .and_then(|u| u.kernel_table_stats())
    }
}

/// How often CPython processes' thread names are read, ns.
const PYTHON_NAMES_EVERY_NS: u64 = 250_000_000;
