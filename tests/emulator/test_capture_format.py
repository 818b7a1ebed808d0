"""The capture format on the Python side (capture_format.py) agrees with the native side it reads: every
enum value and both record layouts are parsed from maya_emu.h and ops_observer.cpp (no compiler needed)."""

import re

import numpy as np
import pytest

from maya.emulator import capture_format as fmt
from maya.emulator.build import NATIVE

HEADER = (NATIVE / "maya_emu.h").read_text()
OBSERVER = (NATIVE / "ops_observer.cpp").read_text()
C_TYPES = {"int64_t": "<i8", "int32_t": "<i4", "int16_t": "<i2", "int8_t": "i1"}


def enum_values(source: str, first: str) -> dict[str, int]:
    """Names and values of the C enum whose first member is `first` (comments dropped, implicit values counted)."""
    body = re.search(r"enum\s*(?::\s*\w+\s*)?\{([^}]*\b" + first + r"\b[^}]*)\}", source).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    values, next_value = {}, 0
    for member in filter(None, (m.strip() for m in body.split(","))):
        name, _, value = (part.strip() for part in member.partition("="))
        next_value = int(value, 0) if value else next_value
        values[name] = next_value
        next_value += 1
    return values


def struct_dtype(source: str, pattern: str) -> np.dtype:
    """The numpy dtype of a C struct of fixed-width integers and char arrays (bytes), laid out as the C compiler
    aligns it."""
    body = re.sub(r"/\*.*?\*/", "", re.search(pattern, source, re.S).group(1), flags=re.S)
    fields = []
    for ctype, names in re.findall(r"(u?int\d+_t|char)\s+([^;]+);", body):
        for name in (n.strip() for n in names.split(",")):
            array = re.fullmatch(r"(\w+)\[(\d+)\]", name)
            if ctype == "char":
                fields.append((array.group(1), f"S{array.group(2)}"))
                continue
            base = C_TYPES[ctype]
            fields.append((array.group(1), base, (int(array.group(2)),)) if array else (name, base))
    return np.dtype(fields, align=True)


def test_record_kinds_flags_and_domains_match_the_header():
    kinds = enum_values(HEADER, "K_PLAIN")
    assert len(kinds) == 10
    assert {name: getattr(fmt, name) for name in kinds} == kinds
    domains = enum_values(HEADER, "D_RUNTIME")
    assert {name: getattr(fmt, name) for name in domains} == domains
    assert [fmt.DOMAINS[v] for v in domains.values()] == [n.removeprefix("D_").lower() for n in domains]
    flags = dict((n, int(v)) for n, v in re.findall(r"#define\s+(F_[A-Z_]+)\s+(\d+)", HEADER))
    assert flags and {name: getattr(fmt, name) for name in flags} == flags


def test_element_types_match_the_header():
    spelled = {"F": "fp", "I": "int", "U": "uint", "BF": "bf", "TF": "tf"}
    types = enum_values(HEADER, "T_UNKNOWN")
    assert len(fmt.DTYPES) == len(types) == max(types.values()) + 1
    assert fmt.DTYPES[types.pop("T_UNKNOWN")] is None
    for name, value in types.items():
        kind, bits = re.fullmatch(r"T_([A-Z]+?)(\d\w*)", name).groups()
        assert fmt.DTYPES[value] == spelled[kind] + bits.lower(), name


def test_memcpy_kinds_match_the_header():
    comment = re.search(r"a1 memcpy kind \(([^)]*)\)", HEADER).group(1)
    named = dict((int(v), n) for v, n in re.findall(r"(\d+) (\w+)", comment))
    assert list(fmt.MEMCPY_KINDS) == [named[v] for v in range(len(named))]


def test_call_record_layout_matches_maya_rec():
    native = struct_dtype(HEADER, r"typedef struct \{(.*?)\}\s*maya_rec;")
    assert native.names == fmt.RECORD_DTYPE.names
    for name in native.names:
        assert native.fields[name] == fmt.RECORD_DTYPE.fields[name], name
    assert native.itemsize == fmt.RECORD_DTYPE.itemsize == int(re.search(r"maya_rec;\s*/\* (\d+) bytes", HEADER)[1])


def test_child_report_layout_matches_maya_child_report():
    native = struct_dtype(HEADER, r"typedef struct \{([^{}]*?)\}\s*maya_child_report;")
    assert native.names == fmt.CHILD_REPORT_DTYPE.names
    for name in native.names:
        assert native.fields[name] == fmt.CHILD_REPORT_DTYPE.fields[name], name
    size = int(re.search(r"maya_child_report;\s*/\* (\d+) bytes", HEADER)[1])
    assert native.itemsize == fmt.CHILD_REPORT_DTYPE.itemsize == size


def test_op_record_layout_and_codes_match_the_observer():
    native = struct_dtype(OBSERVER, r"struct OpRecord \{(.*?)\};")
    assert native.names == fmt.OP_RECORD_DTYPE.names
    for name in native.names:
        assert native.fields[name] == fmt.OP_RECORD_DTYPE.fields[name], name
    assert (
        native.itemsize == fmt.OP_RECORD_DTYPE.itemsize == int(re.search(r"sizeof\(OpRecord\) == (\d+)", OBSERVER)[1])
    )
    assert enum_values(OBSERVER, "ENTER") == {"ENTER": fmt.OP_ENTER, "EXIT": fmt.OP_EXIT}
    assert enum_values(OBSERVER, "FLAG_AUTOGRAD_THREAD") == {"FLAG_AUTOGRAD_THREAD": fmt.OP_FLAG_AUTOGRAD_THREAD}


def test_stand_in_codes_match_the_host_read():
    host_read = (NATIVE / "host_read.c").read_text()
    unknown = int(re.search(r"#define READ_UNKNOWN (\d+)", host_read)[1])
    assert fmt.STAND_INS[unknown] == "unknown"
    zero, one = (
        int(code) for code in re.search(r"a3 what a host read got \(.*?(\d) zero and (\d) one", HEADER, re.S).groups()
    )
    assert (fmt.STAND_INS[zero], fmt.STAND_INS[one]) == ("zero", "one")


@pytest.mark.parametrize("field", ["kind", "flags", "a"])
def test_a_changed_layout_is_caught(field):
    """The parser sees a change to the header: a field widened or moved no longer matches."""
    changed = HEADER.replace(
        "int32_t api, domain, status, device, kind, flags;", "int32_t api, domain, status, device;"
    )
    changed = changed.replace("int64_t a[8];", "int64_t a[8]; int32_t kind, flags;")
    native = struct_dtype(changed, r"typedef struct \{(.*?)\}\s*maya_rec;")
    assert native.fields[field] != fmt.RECORD_DTYPE.fields[field]
