//! Unit tests of reading HotSpot's structures: methods' bytecode ranges
//! and lines, names as the JVM writes them, inlined scopes of compiled
//! code, line tables.

use super::*;

#[test]
fn a_bytecode_pointer_is_held_only_by_its_methods_bytecodes() {
    let m = JavaMethod {
        name: "long Hot.hotOne(int)".into(),
        file: "Hot.java".into(),
        code_start: 0x7000,
        code_size: 40,
        lines: vec![(0, 19)],
    };
    assert!(m.holds(0x7000) && m.holds(0x7027));
    // Another method's (its Method* reused after its class was unloaded).
    assert!(!m.holds(0x7028) && !m.holds(0x6fff) && !m.holds(0));
}

#[test]
fn names_are_written_as_the_jvm_writes_them() {
    assert_eq!(
        external_name(b"Hot", b"hotOne", b"(I)J"),
        "long Hot.hotOne(int)"
    );
    assert_eq!(
        external_name(b"Hot", b"main", b"([Ljava/lang/String;)V"),
        "void Hot.main(java.lang.String[])"
    );
    assert_eq!(
        external_name(b"java/util/concurrent/ConcurrentHashMap", b"tabAt", b"([Ljava/util/concurrent/ConcurrentHashMap$Node;I)Ljava/util/concurrent/ConcurrentHashMap$Node;"),
        "java.util.concurrent.ConcurrentHashMap$Node java.util.concurrent.ConcurrentHashMap.tabAt(java.util.concurrent.ConcurrentHashMap$Node[], int)"
    );
    assert_eq!(
        external_name(b"A", b"f", b"([[JZ)[[D"),
        "double[][] A.f(long[][], boolean)"
    );
    // Not a descriptor: kept as it is, never a panic.
    assert_eq!(
        external_name(b"A", b"f", b"(Lunterminated"),
        "A.f(Lunterminated"
    );
    assert_eq!(external_name(b"A", b"f", b""), "A.f");
}

#[test]
fn inlined_scopes_are_read_innermost_first_and_malformed_ones_refused() {
    // Offset 0 is HotSpot's null; at 1 the nmethod's own scope (no
    // sender, metadata slot 1, bci 4 written +1); at 4 an inlinee
    // (sender 1, slot 2, its entry: bci -1 written 0).
    let code = |stream: Vec<u8>| CompiledCode {
        code_begin: 0x1000,
        pcs: vec![(-1, 0), (10, 4), (20, 1), (30, 0)],
        stream,
        metadata: vec![0xa000, 0xb000],
    };
    let scopes = |c: &CompiledCode, pc: u64, return_address: bool| {
        let mut out = vec![(1, 1)];
        c.scopes(pc, return_address, &mut out);
        out
    };
    let good = code(vec![0, 0, 1, 5, 1, 2, 0]);
    assert_eq!(scopes(&good, 0x100a, true), vec![(0xb000, -1), (0xa000, 4)]);
    // A leaf: the next PcDesc's scopes, at one too; a return address
    // without its own PcDesc is taken so too.
    assert_eq!(scopes(&good, 0x100f, false), vec![(0xa000, 4)]);
    assert_eq!(scopes(&good, 0x100a, false), vec![(0xa000, 4)]);
    assert_eq!(
        scopes(&good, 0x1009, false),
        vec![(0xb000, -1), (0xa000, 4)]
    );
    assert_eq!(scopes(&good, 0x100f, true), vec![(0xa000, 4)]);
    assert_eq!(scopes(&good, 0x1019, false), Vec::new(), "a null scope");
    assert_eq!(
        scopes(&good, 0x2000, false),
        Vec::new(),
        "past the last PcDesc"
    );
    assert_eq!(scopes(&good, 0x0fff, false), Vec::new(), "before the code");
    // A sender that does not go back, a slot outside the metadata, a
    // null slot, a stream cut short: nothing, never a loop or a panic.
    assert_eq!(
        scopes(&code(vec![0, 4, 1, 5, 1, 2, 0]), 0x100a, true),
        Vec::new()
    );
    assert_eq!(
        scopes(&code(vec![0, 0, 3, 5, 1, 2, 0]), 0x100a, true),
        Vec::new()
    );
    assert_eq!(
        scopes(&code(vec![0, 0, 0, 5, 1, 2, 0]), 0x100a, true),
        Vec::new()
    );
    assert_eq!(
        scopes(&code(vec![0, 0, 1, 5, 1, 0xff]), 0x100a, true),
        Vec::new()
    );
}

#[test]
fn line_tables_decode_and_lines_are_found_by_bytecode() {
    // (0, 10) (4, 12) by single bytes; (300, 9) escaped: bci +296, line -3.
    let mut t = vec![(0 << 3) | 7, (0 << 3) | 3, (4 << 3) | 2, 0xff];
    // 296 zigzag = 592: 592 = 208 + 64 * 6 → first byte 208 (≥192), then 6.
    t.extend([208, 6]);
    // -3 zigzag = 5.
    t.push(5);
    t.push(0);
    t.push(0x55); // after the end: not read
    let lines = decode_line_table(&t);
    assert_eq!(lines, vec![(0, 7), (0, 10), (4, 12), (300, 9)]);
    let m = JavaMethod {
        name: String::new(),
        file: String::new(),
        code_start: 1000,
        code_size: 400,
        lines,
    };
    assert_eq!(m.line(1000), 7, "the first entry at its index");
    assert_eq!(m.line(1003), 10, "the last of the greatest index before it");
    assert_eq!(m.line(1004), 12);
    assert_eq!(m.line(1299), 12);
    assert_eq!(m.line(1300), 9);
    assert_eq!(m.line(999), 0, "before the method");
    assert_eq!(m.line(1400), 0, "past its code");
    // Cut short, or all escapes: what was read is kept, nothing panics.
    assert_eq!(decode_line_table(&[0x0a, 0xff, 200]), vec![(1, 2)]);
    assert!(decode_line_table(&[0xff; 64]).len() <= 6);
}
