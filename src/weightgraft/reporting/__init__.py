"""Run outputs: summary.csv and recovery.csv with intervals over facts, paired tests, plots,
report.md/report.html."""
