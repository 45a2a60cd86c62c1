from spec_decode_ci.report.cli import main_entry

main_entry()
