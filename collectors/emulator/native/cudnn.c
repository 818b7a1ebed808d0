#include "maya_emu.h"
