// dralens: one binary, three roles. Everything but this file is a library that tests link.
#include "src/app/cli.h"

int main(int argc, char** argv) { return dralens::app::RunCli(argc, argv); }
