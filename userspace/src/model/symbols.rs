//! What symbolication found for one address: the function and the calls
//! inlined into it. In: nothing (plain data). Out: [`AddrInfo`], carried by
//! every frame of a recording from the symbolizer to the profile and store.

/// One function at an address: the real one (depth 0) or an inlined call.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FuncAtAddr {
    /// Demangled function name.
    pub name: String,
    /// Source file of the code at this address, if known.
    pub file: Option<String>,
    /// Source line, if known.
    pub line: Option<u32>,
    /// The function's first line, where it is part of what identifies the
    /// function: a Python code object's `co_firstlineno` (two functions of
    /// one qualified name in one file, a property's getter and setter, are
    /// two functions). `None` for native code, whose name and library
    /// identify it.
    pub start_line: Option<u32>,
}

/// What is known about one address.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct AddrInfo {
    /// Start of the containing symbol, in the same address space as the input.
    pub symbol_start: u64,
    /// Distance of the looked-up address from the symbol's start.
    pub symbol_offset: u64,
    /// Size of the containing symbol, if known.
    pub symbol_size: Option<u64>,
    /// Outermost function first; empty if unresolved.
    pub funcs: Vec<FuncAtAddr>,
}
