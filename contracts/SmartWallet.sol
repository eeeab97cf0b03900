// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

/**
 * @title SmartWallet
 * @notice The smallest contract wallet that can sign: one owner (an EOA) whose ECDSA signature of
 * a hash is the wallet's, answered through ERC-1271 `isValidSignature`. x402srv's tests sign in
 * with it (docs/sign-in-with-x.md), deployed, and counterfactually through SmartWalletFactory
 * (ERC-6492). It holds no funds and executes nothing: a test fixture, not a wallet to use.
 */
contract SmartWallet {
    /// ERC-1271's magic value: `isValidSignature(bytes32,bytes)`'s selector.
    bytes4 private constant ERC1271_MAGIC_VALUE = 0x1626ba7e;
    /// Half the secp256k1 order: a larger `s` is the malleable twin of a valid signature.
    uint256 private constant HALF_ORDER = 0x7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0;

    address public immutable owner;

    constructor(address owner_) {
        owner = owner_;
    }

    /// ERC-1271: the magic value when the owner signed `hash` (65 bytes, r || s || v), else 0.
    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4) {
        if (signature.length != 65) {
            return 0xffffffff;
        }
        bytes32 r = bytes32(signature[0:32]);
        bytes32 s = bytes32(signature[32:64]);
        uint8 v = uint8(signature[64]);
        if (uint256(s) > HALF_ORDER || (v != 27 && v != 28)) {
            return 0xffffffff;
        }
        address signer = ecrecover(hash, v, r, s);
        return signer != address(0) && signer == owner ? ERC1271_MAGIC_VALUE : bytes4(0xffffffff);
    }
}

/**
 * @title SmartWalletFactory
 * @notice Deploys a SmartWallet at an address known before it exists (CREATE2 on the owner and a
 * salt), the way account-abstraction wallets are deployed with their first transaction. Until
 * then the wallet signs in with ERC-6492 signatures naming this factory and `deploy`'s calldata.
 */
contract SmartWalletFactory {
    event Deployed(address wallet, address owner, bytes32 salt);

    /// Deploys the owner's wallet for `salt` (or returns it when it already exists).
    function deploy(address owner, bytes32 salt) external returns (address wallet) {
        wallet = walletAddress(owner, salt);
        if (wallet.code.length == 0) {
            new SmartWallet{salt: salt}(owner);
            emit Deployed(wallet, owner, salt);
        }
    }

    /// Where `deploy(owner, salt)` puts the wallet (EIP-1014).
    function walletAddress(address owner, bytes32 salt) public view returns (address) {
        bytes32 initCode = keccak256(abi.encodePacked(type(SmartWallet).creationCode, abi.encode(owner)));
        return address(uint160(uint256(keccak256(abi.encodePacked(bytes1(0xff), address(this), salt, initCode)))));
    }
}
