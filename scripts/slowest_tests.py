"""Prints the N slowest tests of one or more pytest JUnit XML reports (scripts/test.sh: CI shows
where its time goes): `python scripts/slowest_tests.py N REPORT.xml...`."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET


def slowest(paths: list[str], n: int) -> list[tuple[float, str]]:
    rows: list[tuple[float, str]] = []
    for path in paths:
        for case in ET.parse(path).iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            rows.append((float(case.get("time", "0") or 0.0), name))
    return sorted(rows, reverse=True)[:n]


def main(argv: list[str]) -> int:
    n, paths = int(argv[0]), argv[1:]
    rows = slowest(paths, n)
    total = sum(float(c.get("time", "0") or 0.0) for p in paths for c in ET.parse(p).iter("testcase"))
    print(f"==== the {len(rows)} slowest tests (of {total:.0f} s of test time in {len(paths)} report(s))")
    for seconds, name in rows:
        print(f"{seconds:8.1f} s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
