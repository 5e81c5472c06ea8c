"""The README's quick-start snippet runs as written, and its set-up commands stay in place."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_quick_start_snippet_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python block"
    exec(compile(blocks[0], "README.md", "exec"), {})


def test_setup_commands_at_the_top():
    first_block = re.search(r"```bash\n(.*?)```", README.read_text(), flags=re.S).group(1)
    commands = [line for line in first_block.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    assert "psattn reproduce --quick" in commands[0] and "pytest" in commands[1]
    assert all("torch==2.13.0" in c for c in commands)
