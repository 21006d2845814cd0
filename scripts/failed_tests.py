"""The node ids of the tests a JUnit XML report (pytest --junitxml) lists as failed or errored,
one per line: scripts/test.sh runs them again, alone, after the parallel phase."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET


def failed_node_ids(report: str) -> list[str]:
    ids: list[str] = []
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.find("failure") is None and case.find("error") is None:
            continue
        # classname "tests.integration.test_x" (+ ".Class"), name "test_y[param]"
        parts = case.get("classname", "").split(".")
        module = [p for p in parts if not p[:1].isupper()]
        classes = [p for p in parts if p[:1].isupper()]
        node = "/".join(module) + ".py"
        ids.append("::".join([node, *classes, case.get("name", "")]))
    return list(dict.fromkeys(ids))


if __name__ == "__main__":
    print("\n".join(failed_node_ids(sys.argv[1])))
