"""Run outputs: summary.csv with bootstrap intervals, plots, report.md/report.html."""
