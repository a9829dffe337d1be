from slurmtrain.entry import main

main()
