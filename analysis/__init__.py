"""Post-processing of sweep outputs: `collect` gathers completed runs into one table, `plot` draws and summarises it."""
