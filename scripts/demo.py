"The paper's counterexample, exactly and by Monte-Carlo: `python scripts/demo.py [--tau 0.1 --samples 20000]`."
from mapg.mdp import mapg_counterexample

if __name__ == '__main__': mapg_counterexample()
