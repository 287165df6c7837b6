

mlu1throw

mlu2x