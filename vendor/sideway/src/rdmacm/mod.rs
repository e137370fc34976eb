pub mod communication_manager;
