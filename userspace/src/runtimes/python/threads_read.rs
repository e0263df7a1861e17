//! The names Python programs gave their threads (`threading.Thread(name=…)`),
//! read from the interpreter's memory.
//!
//! In: a CPython 3.11–3.13 process (its pid, where `_PyRuntime` lies, the
//! version's [`PyLayout`]) and, once found, where its `threading._active`
//! dict lies. Out: (native thread id, name) for every thread `threading`
//! knows, as py-spy shows them. CPython before 3.14 never tells the kernel
//! a thread's name, so its threads are all "python3" there; the names live
//! in the `Thread` objects: `sys.modules["threading"]._active` maps each
//! running thread's ident to its object, whose `_name` and `_native_id`
//! attributes are kept the way instance attributes are (CPython's "managed
//! dict": a values array before the object, tagged in 3.12, inline after it
//! in 3.13, or a dict once one was asked for), keyed by its class's shared
//! keys.
//!
//! The memory is the process's, read as an attacker may have written it:
//! every size is bounded before it is used ([`MAX_ENTRIES`], strings of
//! [`MAX_NAME_CHARS`]), every pointer is read through `process_vm_readv`
//! (a bad one is an error, not a fault), and a wrong answer can only
//! misname that process's own threads.

use crate::runtimes::python::binary::PyLayout;

/// Entries of a dict read, at most (`sys.modules` holds hundreds).
pub const MAX_ENTRIES: u64 = 8192;

/// Characters of a thread's name kept, at most.
pub const MAX_NAME_CHARS: u64 = 256;

/// `Py_TPFLAGS_MANAGED_DICT`: instances keep attributes before the object.
const TPFLAGS_MANAGED_DICT: u64 = 1 << 4;
/// `Py_TPFLAGS_INLINE_VALUES` (3.13): instances keep them after it.
const TPFLAGS_INLINE_VALUES: u64 = 1 << 2;

/// Offsets every version shares (CPython's public or frozen layouts).
const TYPE_BASICSIZE: u64 = 32;
const TYPE_FLAGS: u64 = 168;
const MODULE_DICT: u64 = 16;
const DICT_KEYS: u64 = 32;
const DICT_VALUES: u64 = 40;
const KEYS_LOG2_SIZE: u64 = 8;
const KEYS_LOG2_INDEX_BYTES: u64 = 9;
const KEYS_KIND: u64 = 10;
const KEYS_NENTRIES: u64 = 24;
const KEYS_INDICES: u64 = 32;
const LONG_SIZE: u64 = 16;
const LONG_DIGIT: u64 = 24;
/// The managed dict's pointer, before the object (3.12: or tagged values).
const MANAGED_DICT: u64 = 24;
/// 3.11's values pointer, before the object.
const MANAGED_VALUES_311: u64 = 32;

/// Why thread names were not read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NamesError {
    /// Memory that could not be read (the process exited, a bad pointer).
    #[error("its memory could not be read")]
    Unreadable,
    /// Something that is not what CPython keeps there.
    #[error("a malformed {0}")]
    Malformed(&'static str),
    /// `threading` is not imported (yet): no thread has a name.
    #[error("the threading module is not imported")]
    NoThreading,
}

/// A process's memory: `read(addr, buf)` fills `buf` from `addr` or fails.
pub trait Memory {
    /// Fill `buf` from `addr`; false where it cannot be read.
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;
}

/// A live process's memory.
pub struct Process(pub u32);

impl Memory for Process {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        crate::sys::memory::read_process(self.0, addr, buf).is_ok()
    }
}

/// A CPython interpreter in a process: its memory, version and `_PyRuntime`.
pub struct Interpreter<'a, M: Memory> {
    /// The process's memory.
    pub memory: &'a M,
    /// The version's layout.
    pub layout: &'static PyLayout,
    /// `_PyRuntime` at the process's addresses.
    pub runtime: u64,
}

impl<M: Memory> Interpreter<'_, M> {
    fn word(&self, addr: u64) -> Result<u64, NamesError> {
        let mut b = [0u8; 8];
        if !self.memory.read(addr, &mut b) {
            return Err(NamesError::Unreadable);
        }
        Ok(u64::from_le_bytes(b))
    }

    fn byte(&self, addr: u64) -> Result<u8, NamesError> {
        let mut b = [0u8; 1];
        if !self.memory.read(addr, &mut b) {
            return Err(NamesError::Unreadable);
        }
        Ok(b[0])
    }

    /// Where `threading._active` lies: looked up once, it lives as long as
    /// the module.
    pub fn find_active(&self) -> Result<u64, NamesError> {
        let l = self.layout;
        let interp = self.word(self.runtime.wrapping_add(l.runtime_interp_head))?;
        let modules = self.word(interp.wrapping_add(l.interp_modules))?;
        let threading = self
            .dict_get(modules, "threading")?
            .ok_or(NamesError::NoThreading)?;
        let dict = self.word(threading.wrapping_add(MODULE_DICT))?;
        self.dict_get(dict, "_active")?
            .ok_or(NamesError::Malformed("threading module"))
    }

    /// Every (native thread id, name) of the threads in `active` (the
    /// `threading._active` dict); threads whose object cannot be read are
    /// left out.
    pub fn thread_names(&self, active: u64) -> Result<Vec<(u32, String)>, NamesError> {
        let mut out = Vec::new();
        for (_, thread) in self.dict_entries(active)? {
            if let Ok(Some(named)) = self.thread_name(thread) {
                out.push(named);
            }
        }
        Ok(out)
    }

    /// A `threading.Thread`'s (native id, name), from its attributes.
    fn thread_name(&self, thread: u64) -> Result<Option<(u32, String)>, NamesError> {
        let (Some(name), Some(native_id)) = (
            self.attribute(thread, "_name")?,
            self.attribute(thread, "_native_id")?,
        ) else {
            return Ok(None);
        };
        let Some(tid) = self.small_int(native_id)? else {
            return Ok(None);
        };
        let name = self.string(name, MAX_NAME_CHARS)?;
        Ok(Some((tid, name)))
    }

    /// An instance attribute of `obj` (a plain class's instance), or None.
    fn attribute(&self, obj: u64, name: &str) -> Result<Option<u64>, NamesError> {
        let l = self.layout;
        let ty = self.word(obj.wrapping_add(l.ob_type))?;
        let flags = self.word(ty.wrapping_add(TYPE_FLAGS))?;
        if flags & TPFLAGS_MANAGED_DICT == 0 {
            return Err(NamesError::Malformed("thread object"));
        }
        let dict_ptr = obj.wrapping_sub(MANAGED_DICT);
        // The values array, where the attributes are kept there.
        let values = match l.minor {
            11 => {
                let v = self.word(obj.wrapping_sub(MANAGED_VALUES_311))?;
                (v != 0).then_some(v)
            }
            12 => {
                let v = self.word(dict_ptr)?;
                (v & 1 == 1).then(|| v.wrapping_add(1))
            }
            _ => {
                if flags & TPFLAGS_INLINE_VALUES != 0 {
                    let basic = self.word(ty.wrapping_add(TYPE_BASICSIZE))?;
                    if basic > 1 << 20 {
                        return Err(NamesError::Malformed("type"));
                    }
                    let inline = obj.wrapping_add(basic);
                    // `_dictvalues.valid`: 0 once a dict took them over.
                    (self.byte(inline.wrapping_add(3))? != 0).then_some(inline)
                } else {
                    None
                }
            }
        };
        match values {
            Some(values) => {
                let keys = self.word(ty.wrapping_add(l.heaptype_cached_keys))?;
                self.split_get(keys, self.values_start(values), name)
            }
            None => {
                let dict = self.word(dict_ptr)?;
                if dict == 0 {
                    return Ok(None);
                }
                self.dict_get(dict, name)
            }
        }
    }

    /// Where a `PyDictValues`' pointers begin (3.13 puts 4 bytes of sizes
    /// and flags, padded to 8, before them).
    fn values_start(&self, values: u64) -> u64 {
        if self.layout.minor >= 13 {
            values.wrapping_add(8)
        } else {
            values
        }
    }

    /// `dict[key]` for a str `key`, or None.
    fn dict_get(&self, dict: u64, key: &str) -> Result<Option<u64>, NamesError> {
        let keys = self.word(dict.wrapping_add(DICT_KEYS))?;
        let values = self.word(dict.wrapping_add(DICT_VALUES))?;
        if values != 0 {
            return self.split_get(keys, self.values_start(values), key);
        }
        for (k, v) in self.keys_entries(keys)? {
            if self.str_is(k, key)? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    /// The value of `key` in a split table: its index in the shared `keys`,
    /// into `values`.
    fn split_get(&self, keys: u64, values: u64, key: &str) -> Result<Option<u64>, NamesError> {
        for (i, (k, _)) in self.keys_entries(keys)?.into_iter().enumerate() {
            if self.str_is(k, key)? {
                let v = self.word(values.wrapping_add(8 * i as u64))?;
                return Ok((v != 0).then_some(v));
            }
        }
        Ok(None)
    }

    /// A combined dict's (key, value) pairs, empty slots left out.
    fn dict_entries(&self, dict: u64) -> Result<Vec<(u64, u64)>, NamesError> {
        let keys = self.word(dict.wrapping_add(DICT_KEYS))?;
        let values = self.word(dict.wrapping_add(DICT_VALUES))?;
        if values != 0 {
            return Err(NamesError::Malformed("dict"));
        }
        Ok(self
            .keys_entries(keys)?
            .into_iter()
            .filter(|&(k, v)| k != 0 && v != 0)
            .collect())
    }

    /// A keys object's (key, value) entries in order (value 0 in a split
    /// table's, whose values are elsewhere; key 0 for a deleted slot).
    fn keys_entries(&self, keys: u64) -> Result<Vec<(u64, u64)>, NamesError> {
        let log2_size = self.byte(keys.wrapping_add(KEYS_LOG2_SIZE))?;
        let log2_index_bytes = self.byte(keys.wrapping_add(KEYS_LOG2_INDEX_BYTES))?;
        let kind = self.byte(keys.wrapping_add(KEYS_KIND))?;
        let entries = self.word(keys.wrapping_add(KEYS_NENTRIES))?;
        // Sizes as CPython makes them: an index of 1-8 bytes per slot, at
        // most 2/3 of the slots used.
        if log2_size > 30
            || !(log2_size..=log2_size + 3).contains(&log2_index_bytes)
            || entries > (1u64 << log2_size)
            || entries > MAX_ENTRIES
        {
            return Err(NamesError::Malformed("dict keys"));
        }
        // DICT_KEYS_GENERAL: (hash, key, value); UNICODE and SPLIT: (key, value).
        let (width, key_at) = match kind {
            0 => (24usize, 8usize),
            1 | 2 => (16, 0),
            _ => return Err(NamesError::Malformed("dict keys")),
        };
        let start = keys
            .wrapping_add(KEYS_INDICES)
            .wrapping_add(1u64 << log2_index_bytes);
        let mut raw = vec![0u8; entries as usize * width];
        if !self.memory.read(start, &mut raw) {
            return Err(NamesError::Unreadable);
        }
        let word = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        Ok(raw
            .chunks_exact(width)
            .map(|e| (word(e, key_at), word(e, key_at + 8)))
            .collect())
    }

    /// Whether the str at `addr` is `s` (compact ASCII; anything else is not).
    fn str_is(&self, addr: u64, s: &str) -> Result<bool, NamesError> {
        if addr == 0 {
            return Ok(false);
        }
        let l = self.layout;
        let mut head = [0u8; 64];
        let len = (l.str_ascii_data as usize + s.len()).min(head.len());
        if !self.memory.read(addr, &mut head[..len]) {
            return Err(NamesError::Unreadable);
        }
        let word =
            |at: u64| u64::from_le_bytes(head[at as usize..at as usize + 8].try_into().unwrap());
        let state = word(l.str_state) as u32;
        let compact_ascii = (state >> 5) & 3 == 3 && (state >> 2) & 7 == 1;
        Ok(compact_ascii
            && word(l.str_length) == s.len() as u64
            && &head[l.str_ascii_data as usize..len] == s.as_bytes())
    }

    /// The str at `addr`, of at most `max` characters.
    fn string(&self, addr: u64, max: u64) -> Result<String, NamesError> {
        let l = self.layout;
        let length = self.word(addr.wrapping_add(l.str_length))?;
        let state = self.word(addr.wrapping_add(l.str_state))? as u32;
        let (kind, compact, ascii) = (
            (state >> 2) & 7,
            (state >> 5) & 1 == 1,
            (state >> 6) & 1 == 1,
        );
        if !compact || !matches!(kind, 1 | 2 | 4) {
            return Err(NamesError::Malformed("string"));
        }
        let length = length.min(max);
        let data = addr.wrapping_add(if ascii {
            l.str_ascii_data
        } else {
            l.str_compact_data
        });
        let mut bytes = vec![0u8; (length * kind as u64) as usize];
        if !self.memory.read(data, &mut bytes) {
            return Err(NamesError::Unreadable);
        }
        super::read::decode_compact(kind, ascii, &bytes).ok_or(NamesError::Malformed("string"))
    }

    /// An int of one or two 30-bit digits, positive (a thread id), or None.
    fn small_int(&self, addr: u64) -> Result<Option<u32>, NamesError> {
        let size = self.word(addr.wrapping_add(LONG_SIZE))?;
        // 3.11: ob_size, the digit count (negative for negative ints);
        // 3.12+: lv_tag, digits << 3 | sign (0 positive, 1 zero, 2 negative).
        let digits = if self.layout.minor >= 12 {
            if size & 3 != 0 {
                return Ok(None);
            }
            size >> 3
        } else {
            size
        };
        if !(1..=2).contains(&digits) {
            return Ok(None);
        }
        let mut b = [0u8; 8];
        if !self
            .memory
            .read(addr.wrapping_add(LONG_DIGIT), &mut b[..4 * digits as usize])
        {
            return Err(NamesError::Unreadable);
        }
        let low = u32::from_le_bytes(b[0..4].try_into().unwrap()) as u64 & 0x3fff_ffff;
        let high = u32::from_le_bytes(b[4..8].try_into().unwrap()) as u64 & 0x3fff_ffff;
        Ok(u32::try_from(low | high << 30).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory that reads as zeros where nothing was written, or fails.
    struct Fake(std::collections::BTreeMap<u64, Vec<u8>>);

    impl Memory for Fake {
        fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
            let Some((&start, bytes)) = self.0.range(..=addr).next_back() else {
                return false;
            };
            let at = (addr - start) as usize;
            match bytes.get(at..at + buf.len()) {
                Some(b) => {
                    buf.copy_from_slice(b);
                    true
                }
                None => false,
            }
        }
    }

    /// A keys object that claims more entries than it has room for, or an
    /// index width no dict has, is refused before anything is read by it.
    #[test]
    fn lying_dict_sizes_are_refused() {
        let layout = crate::runtimes::python::binary::layout(12).unwrap();
        for (log2_size, log2_index, entries) in
            [(3u8, 3u8, 9u64), (3, 9, 1), (40, 40, 1), (14, 14, 9000)]
        {
            let mut keys = vec![0u8; 64];
            keys[8] = log2_size;
            keys[9] = log2_index;
            keys[10] = 1;
            keys[24..32].copy_from_slice(&entries.to_le_bytes());
            let mem = Fake([(0x1000u64, keys)].into_iter().collect());
            let interp = Interpreter {
                memory: &mem,
                layout,
                runtime: 0,
            };
            assert_eq!(
                interp.keys_entries(0x1000),
                Err(NamesError::Malformed("dict keys")),
                "{log2_size} {log2_index} {entries}"
            );
        }
    }

    /// A dangling pointer is an error, never a read elsewhere.
    #[test]
    fn unreadable_memory_is_an_error() {
        let layout = crate::runtimes::python::binary::layout(13).unwrap();
        let mem = Fake(Default::default());
        let interp = Interpreter {
            memory: &mem,
            layout,
            runtime: 0x5000,
        };
        assert_eq!(interp.find_active(), Err(NamesError::Unreadable));
    }
}
