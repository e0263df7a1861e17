//! Unit tests of reading V8's objects: position tables, inlined functions
//! at a pc, node 20's code layout, Smis and heap pointers.

use super::code::inlining_id;
use super::*;
use crate::runtimes::v8::binary::{c, k, V8Symbols};

/// A V8 position table's bytes for `entries` (offset, position), as
/// V8's builder writes them (zigzag deltas from offset -1, position 0).
fn encode(entries: &[(i64, i64)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut put = |v: i64| {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        loop {
            let b = (z & 0x7f) as u8;
            z >>= 7;
            if z == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        }
    };
    let (mut offset, mut pos) = (-1i64, 0i64);
    for &(o, p) in entries {
        // Not a statement: the offset's delta written as -delta - 1.
        put(-(o - offset) - 1);
        put(p - pos);
        (offset, pos) = (o, p);
    }
    out
}

/// A SourcePosition at script offset `at` (+1, as V8 stores it) in
/// inlining `id` (0: none).
fn position(at: u64, id: u64) -> u64 {
    ((at + 1) << 1) | (id << 31)
}

#[test]
fn a_position_table_node_wrote_decodes() {
    // The start of TurboFan code's table for `outer` (with `inner`
    // inlined), read from node 20's memory: offsets ascend from 0.
    let bytes = [
        0x03, 0xc8, 0x01, 0x4f, 0x6c, 0x2d, 0x78, 0x39, 0xab, 0x01, 0x15, 0x34, 0x57, 0xbc, 0xfe,
        0xff, 0xff, 0x0f, 0x19, 0x08,
    ];
    let t = decode_positions(&bytes).expect("well formed");
    assert_eq!(t[0], (0, 100));
    assert!(t.windows(2).all(|w| w[0].0 <= w[1].0));
    // One entry's position moves into the inlined function (id 1).
    assert!(t.iter().any(|&(_, p)| inlining_id(p) == 1));
    // Cut short: refused, not guessed.
    assert_eq!(decode_positions(&[0x03, 0xc8]), None);
    // An offset past 4 GiB of code: refused.
    assert_eq!(decode_positions(&encode(&[(1 << 33, 4)])), None);
    let e = [(0, 2), (7, 40), (30, 1 << 40)];
    assert_eq!(
        decode_positions(&encode(&e)),
        Some(e.iter().map(|&(o, p)| (o as u32, p as u64)).collect())
    );
}

#[test]
fn inlined_functions_are_told_innermost_first_at_their_call_sites() {
    // outer inlines f (function 0) at offset 50 of its script, which
    // inlines g (function 1) at offset 70: inlinings 1 and 2.
    let code = JsCode {
        code: 0x1001,
        start: 0x10_0000,
        size: 0x100,
        shared: 0x2001,
        positions: vec![
            (0, position(10, 0)),
            (0x20, position(110, 1)),
            (0x40, position(210, 2)),
            (0x60, position(20, 0)),
        ]
        .into(),
        inlining: vec![(position(50, 0), 0), (position(130, 1), 1)].into(),
        inlined: vec![(0x3001, 0), (0x4001, 0)].into(),
    };
    let mut out = Vec::new();
    code.scopes(0x10_0045, false, &mut out);
    assert_eq!(out, vec![(1, 211), (0, 131), (-1, 51)]);
    code.scopes(0x10_0025, false, &mut out);
    assert_eq!(out, vec![(0, 111), (-1, 51)]);
    // A return address belongs to the call before it: 0x40 is g's
    // first instruction, so a return there was f's call.
    code.scopes(0x10_0040, true, &mut out);
    assert_eq!(out, vec![(0, 111), (-1, 51)]);
    code.scopes(0x10_0070, false, &mut out);
    assert_eq!(out, vec![(-1, 21)]);
    // Outside the code: nothing.
    code.scopes(0x20_0000, false, &mut out);
    assert!(out.is_empty());
    // A table whose inlining points at itself or past the functions
    // ends there: no loop, no index out of range.
    let looping = JsCode {
        inlining: vec![(position(1, 1), 0)].into(),
        positions: vec![(0, position(5, 1))].into(),
        ..code.clone()
    };
    looping.scopes(0x10_0000, false, &mut out);
    assert_eq!(out, vec![(0, 6), (-1, 2)]);
    let past = JsCode {
        inlining: vec![(position(1, 0), 7)].into(),
        positions: vec![(0, position(5, 1))].into(),
        ..code
    };
    past.scopes(0x10_0000, false, &mut out);
    assert_eq!(out, vec![(-1, 6)]);
    // A chain of 200 inlinings (each the next one's caller) gives at
    // most MAX_SCOPES functions, the outer function last.
    let deep = JsCode {
        inlining: (0..200u64)
            .map(|i| (position(i, i), 0))
            .collect::<Vec<_>>()
            .into(),
        positions: vec![(0, position(999, 200))].into(),
        ..past
    };
    deep.scopes(0x10_0000, false, &mut out);
    assert_eq!(out.len(), MAX_SCOPES);
    assert_eq!(out.last(), Some(&(-1, 1)));
    assert_eq!(out[out.len() - 2], (0, 2));
}

#[test]
fn node_20s_code_layout_is_derived_and_others_are_not_guessed() {
    let node20 = crate::runtimes::v8::binary::tests::node20();
    let l = CodeLayout::new(&node20).expect("node 20's layout");
    // Read from node 20's memory (%DebugPrint of an optimized function
    // and its Code): the code at 48, instructions start and size at 40
    // and 56, the InstructionStream at 32.
    assert_eq!((l.function_code, l.start, l.size), (48, 40, 56));
    assert_eq!(l.stream, Some((32, 252, 16)));
    // A V8 whose JSFunction has no gap where 11.3 keeps the code, or
    // whose Code fields are elsewhere, is not guessed at.
    let mut other = node20.clone();
    other.code[c::FUNCTION_PROTOTYPE] = 64;
    assert_eq!(CodeLayout::new(&other), None);
    let mut other = node20.clone();
    other.code[c::CODE_POSITIONS] = 40;
    assert_eq!(CodeLayout::new(&other), None);
    // Named constants are taken as they are.
    let mut named = node20;
    named.code[c::FUNCTION_CODE] = 16;
    named.code[c::CODE_START] = 48;
    named.code[c::CODE_SIZE] = 64;
    let l = CodeLayout::new(&named).expect("named");
    assert_eq!(
        (l.function_code, l.start, l.size, l.stream),
        (16, 48, 64, None)
    );
}

#[test]
fn smis_decode_and_heap_pointers_are_told_apart() {
    let mut values = vec![0; crate::runtimes::v8::binary::WANTED.len()];
    values[k::SMI_TAG_SIZE] = 1;
    values[k::SMI_SHIFT_SIZE] = 31;
    let l = V8Layout::new(&V8Symbols {
        values,
        code: vec![],
    });
    assert_eq!(l.smi(7 << 32), Some(7));
    assert_eq!(l.smi(0x7f00_0000_1001), None);
    assert!(is_heap_object(0x7f00_0000_1001));
    assert!(!is_heap_object(0x7f00_0000_1000));
    assert!(!is_heap_object(0xffff_8000_0000_0001));
}
