//! A thread's tables, built as its samples and markers meet frames.
//!
//! In: the recording's global frames and stack nodes, one at a time. Out:
//! the thread's own string, frame, func, resource, native-symbol and stack
//! tables (version 55 wants them per thread): one frame per (address,
//! inline depth), one func per (library, name) for native code and per
//! (name, file, first line) for interpreted code (every `<module>` and
//! `main` of a Python program is its own function), one stack per (prefix,
//! frame), each made once and memoized.

use rustc_hash::FxHashMap;

use crate::model::recording::{FrameKind, FrameRecord, LibRecord, Recording, NO_LIB};
use crate::model::stack_tree::NO_PARENT;
use crate::model::strings::Interner;

use super::category;
use super::schema::{FrameTable, FuncTable, NativeSymbols, ResourceTable, StackTable};

/// What identifies a function: its library and name; for interpreted code
/// (in no library) also its file and first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FuncIdentity {
    resource: i64,
    name: u32,
    file: Option<u32>,
    start_line: Option<u32>,
}

/// Per-thread table builder.
#[derive(Default)]
pub(super) struct ThreadTables {
    pub(super) strings: Interner,
    pub(super) frames: FrameTable,
    pub(super) funcs: FuncTable,
    pub(super) resources: ResourceTable,
    pub(super) symbols: NativeSymbols,
    pub(super) stacks: StackTable,
    resource_of_lib: FxHashMap<u32, u32>,
    func_of: FxHashMap<FuncIdentity, u32>,
    symbol_of: FxHashMap<(u32, u64), u32>,
    /// global frame -> first and last thread frame (outermost..innermost inline depth)
    frames_of: FxHashMap<u32, (u32, u32)>,
    stack_of_global: FxHashMap<u32, u32>,
    stack_index: FxHashMap<(Option<u32>, u32), u32>,
}

impl ThreadTables {
    fn resource(&mut self, libs: &[LibRecord], lib: u32) -> i64 {
        if lib == NO_LIB {
            return -1;
        }
        if let Some(&r) = self.resource_of_lib.get(&lib) {
            return r as i64;
        }
        let name = self.strings.intern(&libs[lib as usize].name);
        let r = self.resources.length as u32;
        self.resources.lib.push(Some(lib));
        self.resources.name.push(name);
        self.resources.host.push(None);
        self.resources.kind.push(1); // library
        self.resources.length += 1;
        self.resource_of_lib.insert(lib, r);
        r as i64
    }

    /// The func of `name` in `resource`; `interpreted`: also told apart by
    /// its file and first line. A native function's file is the first one
    /// seen (its addresses' lines may lie in several).
    fn func(
        &mut self,
        resource: i64,
        name: &str,
        file: Option<&str>,
        start_line: Option<u32>,
        interpreted: bool,
    ) -> u32 {
        let name = self.strings.intern(name);
        let identity = if interpreted {
            FuncIdentity {
                resource,
                name,
                file: file.map(|f| self.strings.intern(f)),
                start_line,
            }
        } else {
            FuncIdentity {
                resource,
                name,
                file: None,
                start_line: None,
            }
        };
        if let Some(&f) = self.func_of.get(&identity) {
            return f;
        }
        // A native function's file is interned only with its func (the
        // string table holds no file no func names). A relative one is the
        // path a distribution's build wrote (`./csu/../csu/libc-start.c`):
        // left out, so the front end shows the library instead, which says
        // more. The frame keeps its line.
        let file = if interpreted {
            identity.file
        } else {
            file.filter(|f| f.starts_with('/'))
                .map(|f| self.strings.intern(f))
        };
        let f = self.funcs.length as u32;
        self.funcs.name.push(name);
        self.funcs.is_js.push(false);
        self.funcs.relevant_for_js.push(false);
        self.funcs.resource.push(resource);
        self.funcs.file_name.push(file);
        self.funcs.line_number.push(identity.start_line);
        self.funcs.column_number.push(None);
        self.funcs.length += 1;
        self.func_of.insert(identity, f);
        f
    }

    fn native_symbol(
        &mut self,
        lib: u32,
        address: u64,
        name: &str,
        size: Option<u64>,
    ) -> Option<u32> {
        if lib == NO_LIB {
            return None;
        }
        if let Some(&s) = self.symbol_of.get(&(lib, address)) {
            return Some(s);
        }
        let name = self.strings.intern(name);
        let s = self.symbols.length as u32;
        self.symbols.lib_index.push(lib);
        self.symbols.address.push(address);
        self.symbols.name.push(name);
        self.symbols.function_size.push(size);
        self.symbols.length += 1;
        self.symbol_of.insert((lib, address), s);
        Some(s)
    }

    /// One frame of the thread's table; `category`: its (category,
    /// subcategory).
    fn push_frame(
        &mut self,
        address: i64,
        depth: u32,
        (category, subcategory): (u32, u32),
        func: u32,
        sym: Option<u32>,
        line: Option<u32>,
    ) -> u32 {
        let i = self.frames.length as u32;
        self.frames.address.push(address);
        self.frames.inline_depth.push(depth);
        self.frames.category.push(Some(category));
        self.frames.subcategory.push(subcategory);
        self.frames.func.push(func);
        self.frames.native_symbol.push(sym);
        self.frames.inner_window_id.push(None);
        self.frames.line.push(line);
        self.frames.column.push(None);
        self.frames.length += 1;
        i
    }

    /// Thread frames for a global frame: one per inline depth, outermost first.
    fn frames_for(&mut self, rec: &Recording, g: u32, idle: bool) -> (u32, u32) {
        if let Some(&r) = self.frames_of.get(&g) {
            return r;
        }
        let f: &FrameRecord = &rec.frames[g as usize];
        let category = if f.kind == FrameKind::OffCpu {
            category::OFF_CPU
        } else if f.is_pseudo() {
            category::OTHER
        } else if idle {
            category::IDLE
        } else if f.is_kernel() {
            category::KERNEL
        } else if f.is_java() || is_compiled_java(f, &rec.libs) {
            category::JAVA
        } else if f.is_interpreted_javascript() {
            category::JAVASCRIPT
        } else if f.kind == FrameKind::Php {
            category::PHP
        } else if f.kind == FrameKind::Perl {
            category::PERL
        } else if f.kind == FrameKind::Ruby {
            category::RUBY
        } else if f.is_interpreted() {
            category::INTERPRETED
        } else {
            category::USER
        };
        // A Java method is the same function compiled or interpreted: no
        // library (the JIT's perf map is where its name came from, not
        // where it lives), keyed by its name (class, method, signature).
        let java = f.is_java() || is_compiled_java(f, &rec.libs);
        let subcategory = match f.kind {
            FrameKind::JavaInterpreted if category == category::JAVA => category::JAVA_INTERPRETED,
            FrameKind::JavaCompiled if category == category::JAVA => category::JAVA_COMPILED,
            // A method the JVM's perf map names is compiled code; its code
            // cache's other code ("[JIT] java": the template interpreter,
            // stubs) is not told apart.
            FrameKind::Jit
                if category == category::JAVA
                    && f.symbols
                        .funcs
                        .first()
                        .is_some_and(|x| looks_like_java_method(&x.name)) =>
            {
                category::JAVA_COMPILED
            }
            _ => 0,
        };
        let resource = if java {
            -1
        } else {
            self.resource(&rec.libs, f.lib)
        };
        let address = if f.is_pseudo() { -1 } else { f.address as i64 };
        let range = if f.symbols.funcs.is_empty() {
            let name = f.unknown_code_name(&rec.libs);
            let func = self.func(resource, &name, None, None, false);
            let i = self.push_frame(address, 0, (category, subcategory), func, None, None);
            (i, i)
        } else {
            let outer = &f.symbols.funcs[0];
            // Symbol start in the frame's address space: blazesym's offset is
            // relative to the looked-up address, whatever space that was in.
            let sym_start = f.address.saturating_sub(f.symbols.symbol_offset);
            let sym = if f.is_pseudo() {
                None
            } else {
                self.native_symbol(f.lib, sym_start, &outer.name, f.symbols.symbol_size)
            };
            let mut first = None;
            let mut last = 0;
            for (depth, fa) in f.symbols.funcs.iter().enumerate() {
                let func = self.func(
                    resource,
                    &fa.name,
                    fa.file.as_deref(),
                    fa.start_line,
                    f.is_interpreted() && !java,
                );
                last = self.push_frame(
                    address,
                    depth as u32,
                    (category, subcategory),
                    func,
                    sym,
                    fa.line,
                );
                first.get_or_insert(last);
            }
            (first.unwrap(), last)
        };
        self.frames_of.insert(g, range);
        range
    }

    /// A stack of one frame named `name`, of no library: a summary sample
    /// no code ran (the machine's). Call once per name.
    pub(super) fn label_stack(&mut self, name: &str, category: u32) -> u32 {
        let func = self.func(-1, name, None, None, false);
        let frame = self.push_frame(-1, 0, (category, 0), func, None, None);
        self.stack(None, frame)
    }

    fn stack(&mut self, prefix: Option<u32>, frame: u32) -> u32 {
        if let Some(&s) = self.stack_index.get(&(prefix, frame)) {
            return s;
        }
        let s = self.stacks.length as u32;
        self.stacks.prefix.push(prefix);
        self.stacks.frame.push(frame);
        self.stacks.length += 1;
        self.stack_index.insert((prefix, frame), s);
        s
    }

    /// The thread stack for a global stack node (memoized; walks to the root once).
    pub(super) fn stack_for(&mut self, rec: &Recording, node: u32, idle: bool) -> u32 {
        self.stack_or_root(rec, node, idle)
            .expect("a stack's leaf is code or a pseudo frame, not a goroutine's")
    }

    /// [`Self::stack_for`], None for a stack of only goroutine frames: a
    /// Go goroutine's frame is left out (its id goes to what the stack is
    /// of: `model::goroutine_labels`), or a profile would split every call
    /// path once per goroutine.
    fn stack_or_root(&mut self, rec: &Recording, node: u32, idle: bool) -> Option<u32> {
        if let Some(&s) = self.stack_of_global.get(&node) {
            return Some(s);
        }
        let parent = rec.stacks.parent(node);
        let mut prefix = if parent == NO_PARENT {
            None
        } else {
            self.stack_or_root(rec, parent, idle)
        };
        let key = rec.stacks.key(node) as u32;
        if rec.frames[key as usize].kind != FrameKind::Goroutine {
            let (first, last) = self.frames_for(rec, key, idle);
            for frame in first..=last {
                prefix = Some(self.stack(prefix, frame));
            }
        }
        let s = prefix?;
        self.stack_of_global.insert(node, s);
        Some(s)
    }
}

/// Whether `f` is a compiled Java method: a frame of a JIT's perf map named
/// as HotSpot names methods (`void Spin.run()`: a return type, a space, a
/// qualified name with a dot, its parameter list), which neither V8's
/// (`JS:*foo file.js:1`) nor CPython's (`py::foo:file.py`) names are.
pub(super) fn is_compiled_java(
    f: &FrameRecord,
    libs: &[crate::model::recording::LibRecord],
) -> bool {
    if f.is_kernel() || f.is_pseudo() {
        return false;
    }
    let Some(lib) = libs.get(f.lib as usize) else {
        return false;
    };
    if !lib.name.starts_with("JIT (") {
        return false;
    }
    let [only] = f.symbols.funcs.as_slice() else {
        return false;
    };
    looks_like_java_method(&only.name) || only.name == "[JIT] java"
}

/// `ret pkg.Class.method(args)`, as HotSpot writes a method.
fn looks_like_java_method(name: &str) -> bool {
    let Some(open) = name.find('(') else {
        return false;
    };
    if !name.ends_with(')') {
        return false;
    }
    let head = &name[..open];
    match head.rfind(' ') {
        Some(space) => {
            let qualified = &head[space + 1..];
            space > 0 && qualified.contains('.') && !qualified.contains(':')
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::looks_like_java_method;

    /// HotSpot's method names are told from V8's, CPython's and C++'s.
    #[test]
    fn java_methods_are_told_from_other_jit_names() {
        for java in [
            "void Spin.lambda$main$0()",
            "int java.lang.Long.numberOfTrailingZeros(long)",
            "void Spin$$Lambda$1+0x00007f3f68000a08.run()",
            "java.lang.String java.lang.String.valueOf(java.lang.Object)",
        ] {
            assert!(looks_like_java_method(java), "{java}");
        }
        for other in [
            "JS:*foo /app/x.js:1:2",
            "RegExp:(a|b)",
            "py::main:/app/x.py",
            "StubRoutines (1)",
            "counter_overflow Runtime1 stub",
            "std::vector<int>::push_back(int const&)",
            "Interpreter",
        ] {
            assert!(!looks_like_java_method(other), "{other}");
        }
    }
}
