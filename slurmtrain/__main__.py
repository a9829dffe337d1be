from slurmtrain.cli import main

main()
