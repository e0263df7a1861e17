//! What a frame is: native, kernel, JIT, a runtime's (Python, Java
//! interpreted or compiled, JavaScript, PHP, Perl, Ruby), or not code (off-CPU, missing
//! frames, a goroutine's labels).
//!
//! In: set by whoever made the frame (the replay's key, the runtime that
//! read it, a stored byte). Out: to every output, which never guesses it
//! ([`super::recording::FrameRecord::kind`]); a byte a frame in the store.

/// What a frame is, said by whoever made it (the kernel record's kind, the
/// runtime that read it) and carried to every output: the outputs never
/// guess it from a name or a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum FrameKind {
    /// Code in a mapped binary (or at an address in no known mapping).
    #[default]
    Native = 0,
    /// Kernel code.
    Kernel = 1,
    /// Code in anonymous memory: a JIT's, named from its perf map or jitdump.
    Jit = 2,
    /// A CPython function, read from its code object.
    Python = 3,
    /// A Java method read from HotSpot's own objects, interpreted or
    /// compiled not told: a store's frames before its VERSION 7.
    Java = 4,
    /// A JavaScript function, read from V8's own objects.
    JavaScript = 5,
    /// Not code: why a thread was off-CPU (its reason, its run delay, its
    /// short waits summed).
    OffCpu = 6,
    /// Not code: where frames are missing and why (a stack cut short, a
    /// runtime's frame that could not be read).
    Missing = 7,
    /// A Java method HotSpot's interpreter ran, read from its `Method`.
    JavaInterpreted = 8,
    /// A Java method HotSpot compiled, with those inlined into it there,
    /// read from its nmethod.
    JavaCompiled = 9,
    /// A PHP function, read from its `zend_function`.
    Php = 10,
    /// A Perl sub (read from its CV), eval or main program.
    Perl = 11,
    /// A Ruby method or block (read from its iseq).
    Ruby = 12,
    /// Not code: a Go goroutine's pprof labels, at the root of its stacks.
    GoLabels = 13,
    /// Not code: the id of the Go goroutine a stack is of, under its labels
    /// frame (if any) at the root. The outputs take it out of the stack (a
    /// tree per goroutine would split every call path) and give it to what
    /// the stack is of: a sample's label, a wait's field.
    Goroutine = 14,
}

impl FrameKind {
    /// The kind of a stored byte; None for a byte no kind has.
    pub fn from_u8(b: u8) -> Option<FrameKind> {
        use FrameKind::*;
        [
            Native,
            Kernel,
            Jit,
            Python,
            Java,
            JavaScript,
            OffCpu,
            Missing,
            JavaInterpreted,
            JavaCompiled,
            Php,
            Perl,
            Ruby,
            GoLabels,
            Goroutine,
        ]
        .get(b as usize)
        .copied()
    }

    /// A runtime's own frame (named from its objects, with its source file).
    pub fn is_interpreted(self) -> bool {
        matches!(
            self,
            FrameKind::Python
                | FrameKind::JavaScript
                | FrameKind::Php
                | FrameKind::Perl
                | FrameKind::Ruby
        ) || self.is_java()
    }

    /// A Java method (interpreted, compiled, or not told which).
    pub fn is_java(self) -> bool {
        matches!(
            self,
            FrameKind::Java | FrameKind::JavaInterpreted | FrameKind::JavaCompiled
        )
    }

    /// Not code.
    pub fn is_pseudo(self) -> bool {
        matches!(
            self,
            FrameKind::OffCpu | FrameKind::Missing | FrameKind::GoLabels | FrameKind::Goroutine
        )
    }
}
