"Print the shell command that follows `<!-- NAME -->` in README.md (`setup` or `test`), so CI runs exactly what the README says."
import re, sys
from pathlib import Path

name = sys.argv[1]
m = re.search(rf'<!-- {name} -->\s*```sh\n(.*?)\n```', (Path(__file__).resolve().parent.parent/'README.md').read_text(), re.S)
if not m: sys.exit(f"README.md has no command after <!-- {name} -->")
print(m.group(1))
