"Print the shell command that follows `<!-- NAME -->` in README.md (`setup` or `test`), so CI runs exactly what the README says."
import re, sys
from pathlib import Path

def command(name:str)->str|None:
    "The command after `<!-- name -->` in README.md (None if there is none)"
    m = re.search(rf'<!-- {name} -->\s*```sh\n(.*?)\n```', (Path(__file__).resolve().parent.parent/'README.md').read_text(), re.S)
    return m and m.group(1)

if __name__ == '__main__':
    name = sys.argv[1]
    print(command(name) or sys.exit(f"README.md has no command after <!-- {name} -->"))
