"""The teaching guide's instructor kit stays whole and consistent.

* Every question of the prerequisite self-check has an answer, under the same title, in the
  instructor-only block that follows the questions.
* Every rubric criterion carries its points and says what earns 1 of them; each rubric's total
  row is the sum of its criteria and of the general ones.
* The weekly workload table agrees with the syllabus: a week's exercise minutes are the times its
  homework exercises state on their chapter pages, each week's total is the sum of its parts (to
  the quarter hour), and the assignment hours of the weeks add up to the assignments' table.
* The reference results for the assignments type no result by hand: a decimal number there comes
  from a glued value (or sits in math or code).
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = (ROOT / "book" / "teaching_guide.md").read_text()
DURATION = re.compile(r"(\d+(?:\.\d+)?) (min|h)\b")
STATED = re.compile(r":label: (ex-[\w-]+)\s*\n\s*\*[★☆]+ · (\d+) min\*")


def section(title: str) -> str:
    """The text of the ``## `` section whose heading starts with ``title``."""
    match = re.search(rf"^## {re.escape(title)}.*?(?=^## |\Z)", GUIDE, re.M | re.S)
    assert match, f"no section {title!r} in the teaching guide"
    return match.group(0)


def instructor_blocks(text: str) -> list[str]:
    """The bodies of the ``{only} instructor`` blocks of ``text``."""
    pattern = re.compile(r"^(`{3,})\{only\} instructor[ \t]*\n(.*?)^\1[ \t]*$", re.M | re.S)
    return [m.group(2) for m in pattern.finditer(text)]


def instructor_block(title: str) -> str:
    found = [b for b in instructor_blocks(GUIDE) if title in b]
    assert len(found) == 1, f"one instructor-only block titled {title!r}, found {len(found)}"
    return found[0]


def tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table of ``text`` as rows of stripped cells, without its rule line."""
    found, rows = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                rows.append(cells)
        elif rows:
            found.append(rows)
            rows = []
    return found


def minutes(text: str) -> float:
    return sum(float(n) * (60 if unit == "h" else 1) for n, unit in DURATION.findall(text))


def test_every_self_check_question_has_an_answer_for_instructors_only():
    text = section("Before you start")
    blocks = instructor_blocks(text)
    assert len(blocks) == 1, "the answers belong in one {only} instructor block"
    questions = re.findall(r"^(\d+)\. \*([^*]+)\*", text.replace(blocks[0], ""), re.M)
    answers = re.findall(r"^(\d+)\. \*\*([^*]+)\*\*", blocks[0], re.M)
    assert len(questions) >= 10
    assert [int(n) for n, _ in questions] == list(range(1, len(questions) + 1))
    assert answers == questions, "answer every question, in order, under its title"


def test_rubric_points_add_up():
    rubrics = [
        t for t in tables(instructor_block("Rubrics for the assignments")) if "points" in t[0]
    ]
    assert len(rubrics) >= 4  # the general criteria and one table per assignment
    general = None
    for table in rubrics:
        assert table[0][:2] == ["criterion", "points"] and "1 point when" in table[0], table[0]
        criteria = [row for row in table[1:] if not row[0].startswith("**")]
        totals = [row for row in table[1:] if row[0].startswith("**")]
        for row in criteria:
            assert row[1] == "2" and row[2] and row[3], f"criterion {row[0]!r}: points 0-2, 1 and 2"
        assert len(totals) == 1, f"one total row after {criteria[0][0]!r}"
        total = int(totals[0][1].strip("*"))
        own = sum(int(row[1]) for row in criteria)
        if general is None:
            general = own  # the first table: the criteria every assignment shares
            assert total == own
        else:
            assert total == general + own, f"the total after {criteria[0][0]!r}"


def test_weekly_hours_agree_with_the_syllabus_and_the_assignments():
    stated = {}
    for page in sorted((ROOT / "book").glob("[0-9]*.md")):
        stated.update((label, int(m)) for label, m in STATED.findall(page.read_text()))
    syllabus = next(t for t in tables(section("Syllabus A")) if t[0][:2] == ["week", "reading"])
    homework = {row[0]: re.findall(r"<(ex-[\w-]+)>", row[-1]) for row in syllabus[1:]}
    weeks = next(t for t in tables(section("Syllabus A")) if "homework exercises" in t[0])
    assignment_hours = {}
    for week, reading, exercises, other, total in weeks[1:]:
        if week in homework:
            labels = homework[week]
            assert all(label in stated for label in labels), f"week {week}: a time is not stated"
            assert minutes(exercises) == sum(stated[label] for label in labels), f"week {week}"
        parts = minutes(reading) + minutes(exercises) + minutes(other)
        assert minutes(total) == round(parts / 15) * 15, f"week {week}: total"
        for number, hours in re.findall(r"assignment (\d+), (\d+(?:\.\d+)?) h", other):
            assignment_hours[number] = assignment_hours.get(number, 0) + float(hours)
    assert set(homework) <= {row[0] for row in weeks[1:]}
    listed = next(
        t for t in tables(section("Graded assignments")) if t[0][:2] == ["assignment", "hours"]
    )
    assert {row[0]: minutes(row[1]) / 60 for row in listed[1:]} == assignment_hours
    for number, hours, spent in listed[1:]:
        assert minutes(spent) == minutes(hours), f"assignment {number}: the parts add up"


def test_reference_results_type_no_result_by_hand():
    block = instructor_block("Reference results for the assignments")
    assert "{glue:text}`../notebooks/" in block
    text = re.sub(r"\{[\w:-]+\}`[^`]*`", " ", block)  # roles: glued values, references
    text = re.sub(r"\$[^$]*\$|`[^`]*`", " ", text)  # math and code
    assert not re.findall(r"\d+\.\d+|\d+e-?\d+", text), "glue the number or describe it"
