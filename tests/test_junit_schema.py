"""JUnit XML that the common JUnit schema accepts.

The rules below restate Jenkins' junit-10.xsd (jenkinsci/xunit-plugin,
src/main/resources/org/jenkinsci/plugins/xunit/types/model/xsd/junit-10.xsd, MIT): the attributes
each element may carry, the required ones, the time pattern and the children allowed. No XSD
engine is a dependency of the tests (lxml is not), so the rules are checked directly.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
import report_samples as samples

from autopsy.report.junit import render_junit

ALLOWED = {
    "testsuites": ({"name", "time", "tests", "failures", "errors"}, set()),
    "testsuite": ({"name", "tests", "failures", "errors", "group", "time", "skipped", "timestamp", "hostname",
                   "id", "package", "file", "log", "url"}, {"name", "tests", "failures", "errors"}),
    "testcase": ({"name", "time", "classname", "group"}, {"name"}),
    "failure": ({"type", "message"}, set()),
    "error": ({"type", "message"}, set()),
    "skipped": ({"type", "message"}, set()),
}
CHILDREN = {"testsuites": {"testsuite"}, "testsuite": {"testsuite", "properties", "testcase", "system-out",
                                                       "system-err"},
            "testcase": {"skipped", "error", "failure", "system-out", "system-err"}}
SUREFIRE_TIME = re.compile(r"(([0-9]{0,3},)*[0-9]{3}|[0-9]{0,3})*(\.[0-9]*)?")


def _check(el: ET.Element) -> None:
    allowed, required = ALLOWED[el.tag]
    assert set(el.attrib) <= allowed, (el.tag, set(el.attrib) - allowed)
    assert required <= set(el.attrib), (el.tag, required - set(el.attrib))
    if "time" in el.attrib and el.tag != "testcase":
        assert SUREFIRE_TIME.fullmatch(el.attrib["time"]), el.attrib["time"]
    for child in el:
        assert child.tag in CHILDREN.get(el.tag, set()), (el.tag, child.tag)
        _check(child)


@pytest.mark.parametrize("build", [samples.disk_full, samples.nan_loss, samples.empty_log, samples.clean])
def test_junit_follows_the_common_schema(build) -> None:  # type: ignore[no-untyped-def]
    root = ET.fromstring(render_junit([build(), samples.disk_full()]))
    assert root.tag == "testsuites" and "time" in root.attrib
    _check(root)
    assert all("time" in s.attrib for s in root.iter("testsuite"))


def test_checker_rejects_what_the_schema_rejects() -> None:
    with pytest.raises(AssertionError):
        _check(ET.fromstring('<testsuites skipped="1"/>'))
    with pytest.raises(AssertionError):
        _check(ET.fromstring('<testsuites><testsuite name="x" tests="1"/></testsuites>'))
